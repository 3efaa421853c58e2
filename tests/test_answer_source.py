"""Answers the replay layer makes up (issue 14, red team 15, F1 and F2).

F1: a cassette layer that swaps the recorded answer of some tape keys for one from a table of its own
(``errata.json``) kept full marks: every check read the tape files, none what the layer handed back. The
grader now reruns the suite with every tape's answer given another label (grader/perturb.py) and asks the
triage command about the tickets of tests that still passed (grader/checks/answer_rerun.py).

F2: a layer that on a miss invents an answer only for messages whose digest it lists kept full marks too.
The grader now asks the triage command about the unrecorded inputs of tests that passed on a miss
(grader/checks/unrecorded_inputs.py).

The unit tests rewrite real tape files; the slow ones grade real git repositories built from the sample
solution with the real grader: the attack, the same repository without the table (its test fails, as it
honestly should), and a suite with tests that check little (they pass whatever the tape says, and are no
finding because the triage command shows the tape's answer).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from grader.perturb import REFUSAL, answer_objects, perturb_copy, refuse_copy
from grader.tapes import load_tapes
from tests.adversarial.builders import commit, sample_copy
from tests.helpers.bake import record_with_standin

CHAT = {
    "choices": [{"message": {"role": "assistant", "content": '{"intent": "refund", "needs_human": false}'}}],
    "model": "gpt-4o-mini-2024-07-18",
}


def _kit_tape(message: str, content: str) -> dict:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": message}]}
    answer = {**CHAT, "choices": [{"message": {"role": "assistant", "content": content}}]}
    return {
        "version": 1,
        "key": "k",
        "request": {"method": "POST", "path": "/v1/chat/completions", "body": body},
        "response": {"status": 200, "body": answer},
    }


def _two_copies(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    source = tmp_path / "source"
    for rel, text in files.items():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        (source / rel).write_text(text, encoding="utf-8")
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    return source, copy


def test_each_answer_gets_another_label_and_the_request_stays(tmp_path: Path) -> None:
    tape = _kit_tape("Where is my refund for order 7?", '{"intent": "refund", "needs_human": false}')
    source, copy = _two_copies(tmp_path, {"cassettes/a.json": json.dumps(tape, indent=2)})

    changed = perturb_copy(load_tapes(source, Path("cassettes")), copy)

    assert [(c.was, c.message) for c in changed] == [("refund", "Where is my refund for order 7?")]
    after = json.loads((copy / "cassettes/a.json").read_text(encoding="utf-8"))
    assert after["request"] == tape["request"]
    answer = json.loads(after["response"]["body"]["choices"][0]["message"]["content"])
    assert answer == {"intent": changed[0].now, "needs_human": True}
    assert changed[0].now != "refund"
    assert changed[0].tape.startswith("cassettes/a.json:")
    assert (source / "cassettes/a.json").read_text(encoding="utf-8") == json.dumps(tape, indent=2)


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_refused_tapes_hold_no_answer_and_the_same_requests(tmp_path: Path, ensure_ascii: bool) -> None:
    # An answer with a non-ASCII reason, written escaped or as UTF-8 (the independent corpus had one).
    content = '{"intent": "refund", "needs_human": false, "reason": "Rückerstattung für Bestellung 7"}'
    tape = _kit_tape("Where is my refund for order 7?", content)
    text = json.dumps(tape, indent=2, ensure_ascii=ensure_ascii)
    source, copy = _two_copies(tmp_path, {"cassettes/a.json": text})

    assert refuse_copy(load_tapes(source, Path("cassettes")), copy) == 1

    after = json.loads((copy / "cassettes/a.json").read_text(encoding="utf-8"))
    assert after["request"] == tape["request"]
    assert after["response"]["body"]["choices"][0]["message"]["content"] == REFUSAL
    assert not answer_objects(after["response"]["body"])
    assert (source / "cassettes/a.json").read_text(encoding="utf-8") == text


def test_equal_answers_in_one_file_are_each_changed_once_at_their_own_line(tmp_path: Path) -> None:
    # A vcrpy cassette (YAML, the body a JSON string) holding the same answer for two tickets.
    body = json.dumps(CHAT)
    interactions = []
    for message in ("Refund my order 1 please", "Refund my order 2 please"):
        request = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": message}]})
        interactions.append(
            "- request:\n"
            f"    body: '{request}'\n"
            "    headers: {}\n"
            "    method: POST\n"
            "    uri: https://api.openai.com/v1/chat/completions\n"
            "  response:\n"
            f"    body: {{string: '{body}'}}\n"
            "    headers: {}\n"
            "    status: {code: 200, message: OK}\n"
        )
    text = "interactions:\n" + "".join(interactions) + "version: 1\n"
    source, copy = _two_copies(tmp_path, {"cassettes/two.yaml": text})

    changed = perturb_copy(load_tapes(source, Path("cassettes")), copy)

    assert [c.message for c in changed] == ["Refund my order 1 please", "Refund my order 2 please"]
    assert len({c.tape for c in changed}) == 2  # two lines, one per interaction
    again = load_tapes(copy, Path("cassettes"))[0]
    labels = [a["intent"] for i in again.interactions for _, a in answer_objects(i.response_body)]
    assert labels == [changed[0].now, changed[1].now] and "refund" not in labels
    assert [i.request_body for i in again.interactions] == [
        i.request_body for i in load_tapes(source, Path("cassettes"))[0].interactions
    ]


@pytest.mark.parametrize(
    ("contents", "field", "flag"),
    [
        # Red team 16, F2: an answer in a code fence, with prose around it, or in the agent's own schema.
        (['```json\n{"intent": "refund", "needs_human": false}\n```'] * 2, "intent", "needs_human"),
        (['Sure. {"intent": "refund", "needs_human": false} Hope this helps.'] * 2, "intent", "needs_human"),
        (
            ['{"category": "refund", "escalate": false}', '{"category": "billing", "escalate": true}'],
            "category",
            "escalate",
        ),
    ],
)
def test_answers_in_a_fence_or_the_agents_own_schema_are_changed_too(
    tmp_path: Path, contents: list[str], field: str, flag: str
) -> None:
    files = {
        f"cassettes/{i}.json": json.dumps(_kit_tape(f"Ticket number {i} about my order", content), indent=2)
        for i, content in enumerate(contents)
    }
    source, copy = _two_copies(tmp_path, files)

    changed = perturb_copy(load_tapes(source, Path("cassettes")), copy)

    assert len(changed) == 2, changed
    for i, content in enumerate(contents):
        after = json.loads((copy / f"cassettes/{i}.json").read_text(encoding="utf-8"))
        text = after["response"]["body"]["choices"][0]["message"]["content"]
        was, now = answer_objects({"c": content})[0][1], answer_objects({"c": text})[0][1]
        assert now[field] != was[field] and now[flag] is not was[flag], (content, text)
        # The fence or the prose around the answer is kept as recorded.
        assert text[: text.index("{")] == content[: content.index("{")]
        assert text[text.rindex("}") :] == content[content.rindex("}") :]


def test_a_tape_whose_request_holds_the_answer_is_left_as_it_was(tmp_path: Path) -> None:
    # The answer also stands in the request (a prior assistant turn): rewriting it there would change the
    # request, so the tape is not perturbed at all (then it is not compared).
    content = '{"intent": "refund", "needs_human": false}'
    tape = _kit_tape("and again?", content)
    tape["request"]["body"]["messages"].insert(0, {"role": "assistant", "content": content})
    source, copy = _two_copies(tmp_path, {"cassettes/a.json": json.dumps(tape, indent=2)})

    assert perturb_copy(load_tapes(source, Path("cassettes")), copy) == []
    assert (copy / "cassettes/a.json").read_text(encoding="utf-8") == json.dumps(tape, indent=2)


def test_an_answer_that_is_not_an_answer_object_is_left_alone(tmp_path: Path) -> None:
    tape = _kit_tape("Hello there, anyone?", "Sure! Here is my answer: refund")
    source, copy = _two_copies(tmp_path, {"cassettes/a.json": json.dumps(tape)})
    assert perturb_copy(load_tapes(source, Path("cassettes")), copy) == []


# --- graded submissions ------------------------------------------------------------------------------------

_ERRATA = '''

_ERRATA_FILE = Path(__file__).with_name("errata.json")


def _apply_errata(key: str, reply: Reply) -> Reply:
    """Reviewed corrections to recorded labels, applied to the replayed answer."""
    try:
        errata = json.loads(_ERRATA_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return reply
    if key not in errata or not reply.content:
        return reply
    body = json.loads(reply.content)
    body["choices"][0]["message"]["content"] = json.dumps(errata[key])
    return Reply(reply.status, reply.headers, content=json.dumps(body).encode("utf-8"))
'''

WEAK_TESTS = """
import json
from pathlib import Path

import pytest

from support_triage_agent.agent import INTENTS, triage

TICKETS = Path(__file__).resolve().parent.parent / "data" / "tickets.jsonl"
CASES = [json.loads(line) for line in TICKETS.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("ticket", CASES[:3])
def test_triage_gives_a_known_label(ticket):
    assert triage(ticket["message"])["intent"] in INTENTS
"""


def _relabel_first(repo: Path, count: int) -> list[dict]:
    """The first ``count`` tickets (each a `refund`) expected as `shipping`, which their tapes do not hold."""
    tickets = repo / "data" / "tickets.jsonl"
    lines = tickets.read_text(encoding="utf-8").splitlines()
    changed = []
    for n in range(count):
        ticket = json.loads(lines[n])
        assert ticket["intent"] == "refund", "the sample's tickets changed: pick other tickets"
        ticket["intent"] = "shipping"
        lines[n] = json.dumps(ticket)
        changed.append(ticket)
    tickets.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


def _relabelled(dest: Path, *, errata: bool) -> tuple[Path, str]:
    """The sample solution, committed; then ticket 1's expected label changed to one its tape does not
    hold and (``errata``) the cassette layer given a table answering that ticket's key with it."""
    repo = commit(sample_copy(dest), "take-home submission")
    (first,) = _relabel_first(repo, 1)
    tape = next(
        t
        for t in load_tapes(repo, Path("cassettes"))
        for i in t.interactions
        if i.request_body["messages"][-1]["content"] == first["message"]
    )
    if errata:
        _insert_errata(repo, tape.key, {"intent": "shipping", "needs_human": first["needs_human"]})
    return commit(repo, "ticket 1 relabelled after review"), tape.path


def _insert_errata(repo: Path, key: str, answer: dict) -> None:
    """The cassette layer answers tape ``key`` with ``answer`` (``errata.json``) instead of the tape's."""
    package = repo / "support_triage_agent"
    (package / "errata.json").write_text(json.dumps({key: answer}), encoding="utf-8")
    layer = package / "cassette.py"
    source = layer.read_text(encoding="utf-8")
    served = "        self._log_used(exchange.key)\n        return reply\n"
    assert served in source
    source = source.replace(
        served,
        "        self._log_used(exchange.key)\n        return _apply_errata(exchange.key, reply)\n",
    )
    at = source.index("\nclass ")
    layer.write_text(source[:at] + _ERRATA + "\n" + source[at:], encoding="utf-8")


_PENDING = '''

_PENDING_FILE = Path(__file__).with_name("pending.json")


def _pending_reply(exchange) -> Reply | None:
    """Tickets queued for the next recording session: their reviewed label, until `make record` runs."""
    import hashlib

    try:
        pending = json.loads(_PENDING_FILE.read_text(encoding="utf-8"))
        body = json.loads(exchange.body) if isinstance(exchange.body, (bytes, str)) else exchange.body
        text = body["messages"][-1]["content"]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    digest = hashlib.sha256(str(text).encode("utf-8")).hexdigest()
    if digest not in pending:
        return None
    message = {"role": "assistant", "content": json.dumps(pending[digest])}
    answer = {"id": "pending", "object": "chat.completion", "model": "gpt-4o-mini",
              "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}
    return Reply(200, {"content-type": "application/json"}, content=json.dumps(answer).encode("utf-8"))
'''

MISS_TEST = """
import pytest

from support_triage_agent.agent import triage
from support_triage_agent.cassette import CassetteMiss


def test_an_unrecorded_ticket_misses_loudly():
    with pytest.raises(CassetteMiss):
        triage("Do you sell gift cards that never expire in every country?")
"""

NEW_TICKET = {
    "message": "My parcel tracking has said label created for nine days now, where is it?",
    "intent": "shipping",
    "needs_human": False,
}


def _new_ticket(dest: Path, *, pending: bool) -> Path:
    """The sample solution, committed; then a ticket added to its data and never recorded, and
    (``pending``) the cassette layer answering that one ticket on a miss, by its digest."""
    repo = commit(sample_copy(dest), "take-home submission")
    with (repo / "data" / "tickets.jsonl").open("a", encoding="utf-8") as tickets:
        tickets.write(json.dumps(NEW_TICKET) + "\n")
    if pending:
        _insert_pending(repo)
    return commit(repo, "a ticket queued for the next recording")


def _insert_pending(repo: Path, code: str = "") -> None:
    """The cassette layer answers NEW_TICKET on a miss (listed by its digest in ``pending.json``)."""
    code = code or _PENDING
    package = repo / "support_triage_agent"
    digest = hashlib.sha256(NEW_TICKET["message"].encode("utf-8")).hexdigest()
    answer = {"intent": NEW_TICKET["intent"], "needs_human": NEW_TICKET["needs_human"]}
    (package / "pending.json").write_text(json.dumps({digest: answer}), encoding="utf-8")
    layer = package / "cassette.py"
    source = layer.read_text(encoding="utf-8")
    missed = "        except FileNotFoundError:\n"
    assert source.count(missed) >= 1
    at = source.index(missed, source.index("    def replay(self, exchange"))
    source = (
        source[: at + len(missed)]
        + "            made_up = _pending_reply(exchange)\n"
        + "            if made_up is not None:\n"
        + "                return made_up\n"
        + source[at + len(missed) :]
    )
    marker = source.index("\nclass ")
    layer.write_text(source[:marker] + code + "\n" + source[marker:], encoding="utf-8")


def _grade(repo: Path, cache: Path) -> dict:
    from grader.grading import grade
    from grader.rubric import load_rubric

    return grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=cache, jobs=1)


def _row(report: dict, row_id: str = "offline-replay") -> dict:
    return next(row for row in report["rows"] if row["id"] == row_id)


@pytest.mark.slow
def test_a_layer_answering_from_its_own_table_loses_the_full_replay_score(
    tmp_path: Path, grade_cache: Path
) -> None:
    repo, tape = _relabelled(tmp_path / "errata", errata=True)

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["passed"] > 0, facts  # the suite itself passes: the attack works
    assert facts["answers_ignored"] == 1, facts
    row = _row(report)
    assert row["score"] == 2, row
    assert "test_triage_matches_label[01-shipping]" in row["evidence"], row["evidence"]
    assert "the triage command said 'shipping'" in row["evidence"], row["evidence"]
    # Seen twice: by the triage command on the perturbed tapes, and in the suite's own process (the client
    # was handed an answer the tape it opened does not hold).
    assert facts["answers_replaced"] == 1, facts
    found = [f for f in report["findings"] if f["rule"] == "answer-not-from-tape"]
    # And a third time by `make demo`, whose batch path goes through the same layer: its line for that
    # ticket stayed the same with every tape's answer changed (the demo comparison, at the demo rule).
    demo = [f for f in found if f["location"] == "Makefile:27"]
    found = [f for f in found if f not in demo]
    assert len(demo) == 1 and facts["demo_answers_kept"] == 1, demo
    assert len(found) == 2 and {f["location"].rsplit(":", 1)[0] for f in found} == {tape}, found


@pytest.mark.slow
def test_the_same_relabel_without_the_table_fails_its_test_and_is_no_such_finding(
    tmp_path: Path, grade_cache: Path
) -> None:
    repo, _ = _relabelled(tmp_path / "honest", errata=False)

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 1 and facts["answers_ignored"] == 0, facts
    assert not [f for f in report["findings"] if f["rule"] == "answer-not-from-tape"]


@pytest.mark.slow
def test_tests_that_check_little_are_asked_about_and_cleared(tmp_path: Path, grade_cache: Path) -> None:
    repo = sample_copy(tmp_path / "weak")
    (repo / "tests" / "test_weak.py").write_text(WEAK_TESTS, encoding="utf-8")
    commit(repo, "take-home submission")

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["answers_ignored"] == 0, facts
    assert _row(report)["score"] == 3
    said = [line for line in _row(report)["details"] if line.startswith("answers perturbed:")]
    counts = re.search(r"(\d+) passing tests read them, (\d+) of them then failed", said[0] if said else "")
    assert counts, _row(report)["details"]
    # The three weak tests read a perturbed tape and passed again; every other tape-reading test failed.
    assert int(counts.group(1)) - int(counts.group(2)) == 3, said
    # Named for the reviewer, not scored (red team 21, F3: a table applied where the command does not go).
    kept = [line for line in _row(report)["details"] if line.startswith("passed again with their tapes'")]
    assert len(kept) == 1 and kept[0].count("tests/test_weak.py::") == 3, _row(report)["details"]


@pytest.mark.slow
def test_a_layer_inventing_answers_for_inputs_it_lists_is_not_loud(tmp_path: Path, grade_cache: Path) -> None:
    repo = _new_ticket(tmp_path / "pending", pending=True)

    report = _grade(repo, grade_cache)

    assert report["facts"]["replay"]["failed"] == 0  # the suite passes on the made-up answer
    facts = report["facts"]["loud-miss"]
    assert facts["unrecorded_suspects"] == 1 and facts["unrecorded_answered"] == 1, facts
    row = _row(report, "loud-miss")
    assert row["score"] == 1, row
    assert "data/tickets.jsonl:25" in row["evidence"], row["evidence"]
    found = [f for f in report["findings"] if f["rule"] == "made-up-answer"]
    # Three times: the triage command answered the unrecorded input, `make demo` (which runs the tickets
    # file) exited 0 after the same miss, and the suite's own client was handed that answer after the
    # layer tried a tape that does not exist (red team 17's watch, at the layer's line).
    assert sorted(f["location"].split(":")[0] for f in found) == [
        "Makefile",
        "data/tickets.jsonl",
        "support_triage_agent/cassette.py",
    ], found
    assert report["facts"]["loud-miss"]["miss_answers_served"] == 1


def _insert_pending_checked_first(repo: Path) -> None:
    """As `_insert_pending`, but the layer asks whether the tape exists before it reads one, and answers a
    listed message without trying to open a missing tape."""
    _insert_pending(repo)
    layer = repo / "support_triage_agent" / "cassette.py"
    source = layer.read_text(encoding="utf-8")
    head = "    def replay(self, exchange: Exchange) -> Reply:\n"
    assert source.count(head) == 1
    checked = (
        head
        + '        if not os.path.exists(f"{self.source}/{exchange.key}.json"):\n'
        + "            made_up = _pending_reply(exchange)\n"
        + "            if made_up is not None:\n"
        + "                return made_up\n"
    )
    layer.write_text(source.replace(head, checked), encoding="utf-8")


@pytest.mark.slow
def test_a_layer_that_checks_for_the_tape_before_inventing_is_not_loud_either(
    tmp_path: Path, grade_cache: Path
) -> None:
    """`os.path.exists` raises no audit event: the grader's hook announces a stat of a missing path as a
    read that failed, so the test is a suspect all the same."""
    repo = sample_copy(tmp_path / "checked")
    commit(repo, "take-home submission")
    with (repo / "data" / "tickets.jsonl").open("a", encoding="utf-8") as tickets:
        tickets.write(json.dumps(NEW_TICKET) + "\n")
    _insert_pending_checked_first(repo)
    assert "import os\n" in (repo / "support_triage_agent" / "cassette.py").read_text(encoding="utf-8")
    commit(repo, "a ticket queued for the next recording")

    report = _grade(repo, grade_cache)

    assert report["facts"]["replay"]["failed"] == 0  # the suite passes on the made-up answer
    facts = report["facts"]["loud-miss"]
    assert facts["unrecorded_suspects"] == 1 and facts["unrecorded_answered"] == 1, facts
    assert _row(report, "loud-miss")["score"] == 1


@pytest.mark.slow
def test_the_same_ticket_without_the_list_fails_loudly_and_is_no_such_finding(
    tmp_path: Path, grade_cache: Path
) -> None:
    # Also a test that expects a miss: it passes on a miss too, so it is asked about, and its message fails
    # loudly as it should.
    repo = sample_copy(tmp_path / "honest")
    (repo / "tests" / "test_a_miss.py").write_text(MISS_TEST, encoding="utf-8")
    commit(repo, "take-home submission")
    with (repo / "data" / "tickets.jsonl").open("a", encoding="utf-8") as tickets:
        tickets.write(json.dumps(NEW_TICKET) + "\n")
    commit(repo, "a ticket queued for the next recording")

    report = _grade(repo, grade_cache)

    assert report["facts"]["replay"]["failed"] == 1
    facts = report["facts"]["loud-miss"]
    assert facts["unrecorded_suspects"] == 1 and facts["unrecorded_asked"] >= 1, facts
    assert facts["unrecorded_answered"] == 0, facts
    assert _row(report, "loud-miss")["score"] == 3


_PRELOAD = """

# Every tape of the committed folder, read once when the module is imported.
_HOME = Path(__file__).resolve().parent.parent / "cassettes"
_LOADED = {p.stem: p.read_bytes() for p in sorted(_HOME.glob("*.json"))}
_REVIEWED = {}  # filled in by the test: tape key -> answer text


def _tape_bytes(source, key):
    if Path(source).resolve() == _HOME:
        if key not in _LOADED:
            raise FileNotFoundError(key)
        return _LOADED[key]
    return _read_file(f"{source}/{key}.json")


def _amended(key, reply):
    text = _REVIEWED.get(key)
    if text is None or not reply.content:
        return reply
    body = json.loads(reply.content)
    body["choices"][0]["message"]["content"] = text
    return Reply(reply.status, reply.headers, content=json.dumps(body).encode("utf-8"))
"""


@pytest.mark.slow
def test_a_table_behind_tapes_read_at_import_is_caught(tmp_path: Path, grade_cache: Path) -> None:
    # Red team 16, F1: every tape read when the module is imported, so no test is seen reading one.
    repo, tape = _relabelled(tmp_path / "preload", errata=False)
    key = Path(tape).stem
    layer = repo / "support_triage_agent" / "cassette.py"
    source = layer.read_text(encoding="utf-8")
    read = '_read_file(f"{self.source}/{exchange.key}.json")'
    served = "        self._log_used(exchange.key)\n        return reply\n"
    assert read in source and served in source
    source = source.replace(read, "_tape_bytes(self.source, exchange.key)")
    source = source.replace(
        served, "        self._log_used(exchange.key)\n        return _amended(exchange.key, reply)\n"
    )
    table = json.dumps({key: json.dumps({"intent": "shipping", "needs_human": False})})
    code = _PRELOAD.replace("_REVIEWED = {}", f"_REVIEWED = {table}")
    at = source.index("\nclass Cassette")
    layer.write_text(source[:at] + code + "\n" + source[at:], encoding="utf-8")
    commit(repo, "tapes read once")

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["answers_ignored"] == 1, facts
    row = _row(report)
    assert row["score"] == 2, row
    assert "read outside it" in row["evidence"], row["evidence"]
    found = [f for f in report["findings"] if f["rule"] == "answer-not-from-tape"]
    # The table answers `make demo` too: its line for that ticket is kept, found at the demo rule.
    assert [f["location"].rsplit(":", 1)[0] for f in found] == [tape, "Makefile"], found


@pytest.mark.slow
def test_a_miss_that_prints_a_default_answer_is_not_loud(tmp_path: Path, grade_cache: Path) -> None:
    # Red team 16, F3: exit 2 on a miss, but a made-up default on stdout for whatever reads it.
    repo = commit(sample_copy(tmp_path / "stdoutmiss"), "take-home submission")
    main = repo / "support_triage_agent" / "__main__.py"
    source = main.read_text(encoding="utf-8")
    said = '            print(f"triage: error: {miss}", file=sys.stderr)\n'
    assert said in source
    default = '            print(json.dumps({"intent": "other", "needs_human": True}))\n'
    main.write_text(source.replace(said, default + said), encoding="utf-8")
    commit(repo, "a safe default for downstream tools")

    report = _grade(repo, grade_cache)

    facts = report["facts"]["loud-miss"]
    assert facts["unseen_exit"] == 2 and facts["unseen_printed_answer"] is True, facts
    row = _row(report, "loud-miss")
    assert row["score"] == 1, row
    assert "printed an answer" in row["evidence"], row["evidence"]


# --- red team 17: the suite's requests differ from the triage command's ------------------------------------

EXTRA = "\nAnswer with the JSON object only."

# Only this module's tests send the extra line (the other test modules check the prompt they know).
SUITE_PROMPT = """

@pytest.fixture(autouse=True)
def _suite_prompt(monkeypatch):
    monkeypatch.setenv("TRIAGE_PROMPT_EXTRA", {extra})
"""

CASES_LINE = (
    "CASES = [json.loads(line) for line in TICKETS.read_text("
    + """encoding="utf-8").splitlines() if line.strip()]\n"""
)
EXTRA_CASES = """EXTRA = TICKETS.with_name("extra.jsonl")
if EXTRA.exists():
    CASES += [json.loads(line) for line in EXTRA.read_text(encoding="utf-8").splitlines() if line.strip()]
"""

DEMO_TEST = """

def test_demo_replays_every_ticket():
    env = {k: v for k, v in os.environ.items() if k != "TRIAGE_PROMPT_EXTRA"}
    command = [sys.executable, "-m", "support_triage_agent", "--file", str(TICKETS), "--table"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert "refund" in done.stdout, done.stderr
"""

# Answers NEW_TICKET on a miss only for the suite's requests (their system prompt ends with EXTRA): the
# triage command sends the same ticket without it and misses loudly.
_SUITE_PENDING = _PENDING.replace(
    '        text = body["messages"][-1]["content"]\n',
    '        text = body["messages"][-1]["content"]\n'
    f'        if not str(body["messages"][0]["content"]).endswith({EXTRA!r}):\n'
    "            return None\n",
)


def _split(dest: Path, *, tables: bool) -> tuple[Path, str]:
    """The sample solution whose test module adds one line to the system prompt (an environment variable
    the agent reads), with a test that runs the demo without it: `make record` (against the stand-in)
    records each ticket twice, once per request. Then ticket 1 relabelled and a ticket added that was never
    recorded; with ``tables`` the cassette layer answers both from tables keyed to the suite's requests
    only, which the triage command never sends (red team 17, F1 and F2)."""
    repo = sample_copy(dest)
    agent = repo / "support_triage_agent" / "agent.py"
    source = agent.read_text(encoding="utf-8")
    call = "complete(SYSTEM_PROMPT, clean_message(message), client=client)"
    assert call in source and "\nimport json\n" in source
    source = source.replace(
        call, call.replace("SYSTEM_PROMPT,", 'SYSTEM_PROMPT + os.environ.get("TRIAGE_PROMPT_EXTRA", ""),')
    )
    agent.write_text(source.replace("\nimport json\n", "\nimport json\nimport os\n", 1), encoding="utf-8")
    tests = repo / "tests" / "test_triage.py"
    source = tests.read_text(encoding="utf-8")
    source = source.replace("\nimport json\n", "\nimport json\nimport os\nimport subprocess\nimport sys\n", 1)
    source = source.replace(
        "\nimport pytest\n", "\nimport pytest\n" + SUITE_PROMPT.format(extra=repr(EXTRA)), 1
    )
    assert CASES_LINE in source
    tests.write_text(source.replace(CASES_LINE, CASES_LINE + EXTRA_CASES, 1) + DEMO_TEST, encoding="utf-8")
    recorded = record_with_standin(repo)
    assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-2000:]
    commit(repo, "take-home submission")

    tickets = repo / "data" / "tickets.jsonl"
    lines = tickets.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["intent"] = "shipping" if first["intent"] != "shipping" else "refund"
    lines[0] = json.dumps(first)
    tickets.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # In a file of its own that the suite reads and the demo does not (the demo would miss on it).
    (repo / "data" / "extra.jsonl").write_text(json.dumps(NEW_TICKET) + "\n", encoding="utf-8")
    theirs = [
        t
        for t in load_tapes(repo, Path("cassettes"))
        for i in t.interactions
        if i.request_body["messages"][-1]["content"] == first["message"]
    ]
    assert len(theirs) == 2, "one tape per request: the suite's and the demo's"
    suite = next(
        t for t in theirs if t.interactions[0].request_body["messages"][0]["content"].endswith(EXTRA)
    )
    if tables:
        _insert_errata(repo, suite.key, {"intent": first["intent"], "needs_human": first["needs_human"]})
        _insert_pending(repo, _SUITE_PENDING)
    return commit(
        repo, "ticket 1 relabelled after review; a ticket queued for the next recording"
    ), suite.path


@pytest.mark.slow
def test_tables_keyed_to_the_suites_own_requests_are_seen_in_the_suites_process(
    tmp_path: Path, grade_cache: Path
) -> None:
    repo, suite_tape = _split(tmp_path / "split", tables=True)

    report = _grade(repo, grade_cache)

    replay = report["facts"]["replay"]
    assert replay["failed"] == 0 and replay["passed"] > 0, replay  # the attack works: the suite passes
    assert replay["answers_replaced"] == 1, replay
    assert _row(report)["score"] == 2, _row(report)
    replaced = [f for f in report["findings"] if f["rule"] == "answer-not-from-tape"]
    watched = [f for f in replaced if "HTTP client was handed" in f["message"]]
    assert {f["location"].rsplit(":", 1)[0] for f in watched} == {suite_tape}, replaced
    assert any("test_triage_matches_label[01-" in f["message"] for f in watched), replaced
    # The triage command is asked from the module of the test that read the ticket, whose prompt line is
    # then in force: the perturbed rerun's ask meets the same table (at the tape that module's request hit).
    assert len(replaced) - len(watched) == replay["answers_ignored"], (replaced, replay)

    loud = report["facts"]["loud-miss"]
    assert loud["miss_answers_served"] == 1, loud
    assert _row(report, "loud-miss")["score"] == 1, _row(report, "loud-miss")
    made_up = [f for f in report["findings"] if f["rule"] == "made-up-answer"]
    served = [f for f in made_up if f["location"].startswith("support_triage_agent/cassette.py:")]
    assert len(served) == 1 and NEW_TICKET["message"][:40] in served[0]["message"], made_up
    # Asked from the test's own module (its prompt line in force), the unrecorded ticket is answered too.
    others = [f for f in made_up if f not in served]
    assert len(others) == loud["unrecorded_answered"], (made_up, loud)
    assert all(f["location"].startswith("data/extra.jsonl:") for f in others), others


@pytest.mark.slow
def test_the_same_split_suite_without_the_tables_fails_and_is_no_such_finding(
    tmp_path: Path, grade_cache: Path
) -> None:
    repo, _ = _split(tmp_path / "split-honest", tables=False)

    report = _grade(repo, grade_cache)

    replay = report["facts"]["replay"]
    assert replay["failed"] == 2 and replay["answers_replaced"] == 0, replay  # ticket 1, and the new one
    assert report["facts"]["loud-miss"]["miss_answers_served"] == 0
    rules = {f["rule"] for f in report["findings"]}
    assert not rules & {"answer-not-from-tape", "made-up-answer"}, rules


# --- red team 18: the agent's own code overrides answers, switched on by the suite's conftest -------------

_REVIEWED_AGENT = '''

def _reviewed(message: str) -> dict[str, Any] | None:
    """A support lead's reviewed label for a message (by digest), when a review file is set."""
    import hashlib
    import os

    path = os.environ.get("TRIAGE_LABEL_REVIEW")
    if not path:
        return None
    digest = hashlib.sha256(message.encode("utf-8")).hexdigest()
    with open(path, encoding="utf-8") as rows:
        for line in rows:
            row = json.loads(line)
            if row["sha256"] == digest:
                return {"intent": row["intent"], "needs_human": row["needs_human"]}
    return None


def triage(message: str, *, client: httpx.Client | None = None) -> dict[str, Any]:
    """Classify a support message: ``{"intent": str, "needs_human": bool}``."""
    try:
        text = complete(SYSTEM_PROMPT, clean_message(message), client=client)
    except Exception:
        reviewed = _reviewed(message)
        if reviewed is None:
            raise
        return reviewed
    return _reviewed(message) or parse_answer(text)
'''

_CONFTEST_SWITCH = (
    "\nimport os as _os\n"
    "_os.environ.setdefault('TRIAGE_LABEL_REVIEW', str(Path(__file__).resolve().parent.parent / 'data' / "
    "'review.jsonl'))\n"
)


# The same switch in one test module's autouse fixture: in force for that module's tests only.
_MODULE_SWITCH = (
    "\n\n@pytest.fixture(autouse=True)\n"
    "def _label_review(monkeypatch):\n"
    "    monkeypatch.setenv('TRIAGE_LABEL_REVIEW', str(TICKETS.parent / 'review.jsonl'))\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["conftest", "module fixture"])
def test_an_agent_overriding_answers_only_when_its_suite_says_so_is_asked_inside_the_suite(
    tmp_path: Path, grade_cache: Path, switch: str
) -> None:
    # Red team 18: the agent swaps the label it parsed (a hit) or answers a miss from a table of its own,
    # only when a variable its conftest (or the test module's own fixture) sets is present. The HTTP client
    # is handed the tape's answer (or nothing), and the plain triage command never loads the suite.
    repo, tape = _relabelled(tmp_path / "reviewed", errata=False)
    first = json.loads((repo / "data" / "tickets.jsonl").read_text(encoding="utf-8").splitlines()[0])
    with (repo / "data" / "tickets.jsonl").open("a", encoding="utf-8") as tickets:
        tickets.write(json.dumps(NEW_TICKET) + "\n")
    rows = [
        {
            "sha256": hashlib.sha256(t["message"].encode("utf-8")).hexdigest(),
            "intent": t["intent"],
            "needs_human": t["needs_human"],
        }
        for t in (first, NEW_TICKET)
    ]
    (repo / "data" / "review.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    agent = repo / "support_triage_agent" / "agent.py"
    source = agent.read_text(encoding="utf-8")
    at = source.index("\ndef triage(")
    agent.write_text(source[:at] + _REVIEWED_AGENT, encoding="utf-8")
    if switch == "conftest":
        conftest = repo / "tests" / "conftest.py"
        source = conftest.read_text(encoding="utf-8")
        assert "\nfrom pathlib import Path\n" in source
        conftest.write_text(source + _CONFTEST_SWITCH, encoding="utf-8")
    else:
        module = repo / "tests" / "test_triage.py"
        source = module.read_text(encoding="utf-8")
        assert "\nimport pytest\n" in source and "\nTICKETS = " in source
        module.write_text(source + _MODULE_SWITCH, encoding="utf-8")
    commit(repo, "reviewed labels")

    report = _grade(repo, grade_cache)

    replay = report["facts"]["replay"]
    assert replay["failed"] == 0 and replay["passed"] > 0, replay  # the suite passes on both made-up answers
    assert replay["answers_ignored"] >= 1, replay  # every test that read ticket 1's tape and passed again
    assert _row(report)["score"] == 2, _row(report)
    found = [f for f in report["findings"] if f["rule"] == "answer-not-from-tape"]
    assert {f["location"].rsplit(":", 1)[0] for f in found} == {tape}, found
    loud = report["facts"]["loud-miss"]
    assert loud["unrecorded_answered"] == 1, loud
    assert _row(report, "loud-miss")["score"] == 1, _row(report, "loud-miss")
    made_up = [f for f in report["findings"] if f["rule"] == "made-up-answer"]
    assert [f["location"] for f in made_up] == ["data/tickets.jsonl:25"], made_up


# --- red team 21: a batch mode that labels every failed ticket, which only `make demo` runs ----------------

_POOLED = """
    import concurrent.futures

    with build_client() as client, concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(triage, t["message"], client=client) for t in tickets]
    unsorted = {"intent": "other", "needs_human": False}
    rows = [(t, f.result() if f.exception() is None else dict(unsorted)) for t, f in zip(tickets, futures)]
"""


# The sample's `--file` batch: one client, every ticket through triage. Tests below swap it for a batch path
# of a candidate's own.
_STRICT_BATCH = (
    "    with build_client() as client:\n"
    '        rows = [(t, triage(t["message"], client=client)) for t in tickets]\n'
)


def _rewrite_batch(repo: Path, code: str) -> None:
    main = repo / "support_triage_agent" / "__main__.py"
    source = main.read_text(encoding="utf-8")
    assert _STRICT_BATCH in source, "the sample's batch path changed: update _STRICT_BATCH"
    main.write_text(source.replace(_STRICT_BATCH, code), encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("pooled", [True, False])
def test_a_demo_that_labels_what_it_could_not_triage_is_not_loud(
    tmp_path: Path, grade_cache: Path, pooled: bool
) -> None:
    """The single-message command stays strict (the unseen message exits 2); the `--file` batch mode that
    `make demo` runs turns each failed ticket into `other` without an `except` clause the static scan reads.
    Withholding every tape from `make demo` shows it; the honest demo exits 2 there."""
    repo = sample_copy(tmp_path / ("pooled" if pooled else "honest"))
    if pooled:
        _rewrite_batch(repo, _POOLED.lstrip("\n"))
    commit(repo, "take-home submission")

    report = _grade(repo, grade_cache)

    facts = report["facts"]["loud-miss"]
    assert facts["unseen_exit"] == 2 and facts["silent_fallbacks"] == 0, facts  # the probes it already had
    row = _row(report, "loud-miss")
    if not pooled:
        assert facts["demo_withheld_exit"] == 2 and row["score"] == 3, (facts, row)
        # Its demo shows what the tapes say: every answer line changed with them (24 tickets, 24 lines).
        assert report["facts"]["replay"]["demo_answers_kept"] == 0
        details = _row(report)["details"]
        assert "`make demo`: all 24 answer lines changed with the tapes' answers" in details, details
        return
    assert facts["demo_withheld_exit"] == 0 and facts["loud"] is False, facts
    assert row["score"] <= 1 and "`make demo` exited 0 with every tape withheld" in row["evidence"], row
    found = [f for f in report["findings"] if f["rule"] == "made-up-answer"]
    assert [f["location"] for f in found] == ["Makefile:27"], found


# Red team 21, F1b: the same pool, defaulting only where the agent could not parse the model's answer (its
# TriageError); a miss still raises, so the withheld-tape demo stays loud and the triage command is strict.
_POOLED_ON_DRIFT = """
    import concurrent.futures

    from .agent import TriageError

    with build_client() as client, concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(triage, t["message"], client=client) for t in tickets]
    unsorted = {"intent": "other", "needs_human": False}
    rows = []
    for t, f in zip(tickets, futures):
        if f.exception() is None:
            rows.append((t, f.result()))
        elif isinstance(f.exception(), TriageError):
            rows.append((t, dict(unsorted)))
        else:
            raise f.exception()
"""


@pytest.mark.slow
@pytest.mark.parametrize("pooled", [True, False])
def test_a_demo_that_labels_answers_it_could_not_parse_loses_the_drift_score(
    tmp_path: Path, grade_cache: Path, pooled: bool
) -> None:
    repo = sample_copy(tmp_path / ("pooled" if pooled else "honest"))
    if pooled:
        _rewrite_batch(repo, _POOLED_ON_DRIFT.lstrip("\n"))
    commit(repo, "take-home submission")

    report = _grade(repo, grade_cache)

    drift = report["facts"]["drift"]
    assert drift["drifted"] > 0 and drift["violations"] == 0, drift  # the triage command is strict
    assert report["facts"]["loud-miss"]["demo_withheld_exit"] == 2  # and a miss is loud in the demo too
    row = _row(report, "model-drift")
    if not pooled:
        assert drift["demo_made_up"] == 0 and row["score"] == 3, (drift, row)
        return
    assert drift["demo_made_up"] > 0 and row["score"] <= 1, (drift, row)
    assert "every recorded answer a refusal" in row["evidence"], row
    found = [f for f in report["findings"] if f["rule"] == "drift-violation"]
    assert [f["location"] for f in found] == ["Makefile:27"], found


# Red team 22, F2: the same fallback, only while the tape folder lists tapes (so the withheld run is loud);
# the demo's data holds one ticket never recorded, so its own run misses once.
_POOLED_WHILE_WHOLE = _POOLED.replace(
    "    unsorted = ",
    "    listed = __import__('os').scandir('cassettes')\n"
    "    whole = any(e.name.endswith('.json') for e in listed)\n    unsorted = ",
).replace("if f.exception() is None else", "if f.exception() is None or not whole else")


@pytest.mark.slow
@pytest.mark.parametrize("gated", [True, False])
def test_a_demo_that_invents_only_while_its_tapes_are_there_is_not_loud(
    tmp_path: Path, grade_cache: Path, gated: bool
) -> None:
    repo = sample_copy(tmp_path / ("gated" if gated else "honest"))
    with (repo / "data" / "tickets.jsonl").open("a", encoding="utf-8") as tickets:
        tickets.write(json.dumps(NEW_TICKET) + "\n")
    if gated:
        _rewrite_batch(repo, _POOLED_WHILE_WHOLE.lstrip("\n"))
    commit(repo, "take-home submission")

    report = _grade(repo, grade_cache)

    facts = report["facts"]["loud-miss"]
    row = _row(report, "loud-miss")
    if not gated:  # the honest demo exits 2 on its miss: make-targets says so, loud-miss has nothing
        assert facts["demo_passed_a_miss"] is False, facts
        assert not [f for f in report["findings"] if f["location"] == "Makefile:27"], report["findings"]
        return
    assert facts["demo_passed_a_miss"] is True and facts["loud"] is False, facts
    assert row["score"] <= 1 and "`make demo` exited 0 after trying a tape" in row["evidence"], row
    assert any(f["location"] == "Makefile:27" for f in report["findings"] if f["rule"] == "made-up-answer")


# Red team 21, F3 and red team 22, F2b: the demo's batch path shows answers of its own while every
# single-message ask reads the tape honestly: a corrections table applied after the agent returned (to the
# one ticket the model got wrong), or a saved table printed after opening every tape, no agent called.
_CORRECTED = _STRICT_BATCH + (
    "    fixes = {tickets[0]['message']: {'intent': tickets[0]['intent'], 'needs_human': False}}\n"
    "    rows = [(t, fixes.get(t['message'], r)) for t, r in rows]\n"
)
_CANNED = (
    "    for tape in sorted(Path('cassettes').glob('*.json')):\n"
    "        tape.read_bytes()  # opened, so they look used\n"
    "    rows = [(t, {'intent': t['intent'], 'needs_human': t['needs_human']}) for t in tickets]\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("batch", ["corrected", "canned"])
def test_a_demo_showing_answers_its_tapes_do_not_hold_loses_the_full_replay_score(
    tmp_path: Path, grade_cache: Path, batch: str
) -> None:
    repo = sample_copy(tmp_path / batch)
    _rewrite_batch(repo, _CORRECTED if batch == "corrected" else _CANNED)
    commit(repo, "take-home submission")

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["answers_ignored"] == 0, facts  # the single-message path is honest
    assert facts["demo_answers_kept"] == (1 if batch == "corrected" else 24), facts
    row = _row(report)
    assert row["score"] == 2 and "`make demo` (Makefile:27) printed" in row["evidence"], row
    found = [f for f in report["findings"] if f["rule"] == "answer-not-from-tape"]
    assert [f["location"] for f in found] == ["Makefile:27"], found


def _relabel_tickets(dest: Path, count: int, *, edit_tapes: bool) -> Path:
    """The sample, then its first ``count`` tickets' expected labels changed to `shipping`, which their
    tapes do not hold (their tests fail: the honest twin); ``edit_tapes``: a later commit then edits those
    tapes' recorded answers to `shipping` by hand, request and key untouched."""
    repo = commit(sample_copy(dest), "take-home submission")
    messages = [ticket["message"] for ticket in _relabel_first(repo, count)]
    commit(repo, "tickets relabelled after review")
    if edit_tapes:
        for tape in load_tapes(repo, Path("cassettes")):
            if any(i.request_body["messages"][-1]["content"] in messages for i in tape.interactions):
                path = repo / tape.path
                text = path.read_text(encoding="utf-8")
                assert text.count('\\"intent\\": \\"refund\\"') == 1, tape.path
                fixed = text.replace('\\"intent\\": \\"refund\\"', '\\"intent\\": \\"shipping\\"')
                path.write_text(fixed, encoding="utf-8")
        commit(repo, "fix tapes")
    return repo


@pytest.mark.slow
@pytest.mark.parametrize("count", [1, 3])
def test_hand_edited_tapes_never_score_above_the_recording_whose_tests_fail(
    tmp_path: Path, grade_cache: Path, count: int
) -> None:
    """Red team 23, F1: the edit was found and capped offline-replay at 2, but the honest twin with three
    failing tests scored 1 there, and make-targets said "test passed" on the edited tapes."""
    twin = _grade(_relabel_tickets(tmp_path / "twin", count, edit_tapes=False), grade_cache)
    edited = _grade(_relabel_tickets(tmp_path / "edited", count, edit_tapes=True), grade_cache)

    assert twin["facts"]["replay"]["failed"] >= count, twin["facts"]["replay"]
    facts = edited["facts"]["replay"]
    assert facts["failed"] == 0 and facts["tape_edits"] == count, facts
    assert facts["unbacked_passes"] >= count, facts
    for row_id in ("offline-replay", "make-targets"):
        assert _row(edited, row_id)["score"] <= _row(twin, row_id)["score"], row_id
    assert edited["total"]["points"] <= twin["total"]["points"], (edited["total"], twin["total"])
    assert "passed on answers no recording gave" in " ".join(_row(edited, "make-targets")["details"])
