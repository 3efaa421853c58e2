"""The loud-miss check's re-worded rerun (red-team R5, R5b, R5c): the suite rerun with the tapes withheld
and every recorded user message re-worded wherever the repository's text files hold it, so that the suite's
own library calls send requests no tape ever held.

The re-wording itself is tested on files; the probe on real submissions: copies of the sample with the red
team's few lines added, graded for real."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from grader.audit import AuditLog
from grader.checks.loud_miss import _names_miss
from grader.checks.reworded_rerun import answered, answered_in_place
from grader.context import ReplayRun
from grader.grading import grade
from grader.reword import plan, reword_copy
from grader.rubric import load_rubric
from grader.sandbox import RunResult
from grader.selftest import load_corpus
from grader.selftest.runner import build_case
from grader.tamper import GuardLog
from tests.helpers.bake import record_with_standin

_MESSAGE = 'My "premium" order #4411 can\'t be found, where is it?'
_OTHER = "Please reimburse me for the headphones that arrived cracked."


def _copy_of(root: Path) -> Path:
    copy = root.parent / f"{root.name}-copy"
    subprocess.run(["cp", "-a", str(root), str(copy)], check=True)
    return copy


def test_every_spelling_of_a_recorded_message_is_reworded_the_same_way(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "cassettes").mkdir()
    (repo / "data" / "tickets.jsonl").write_text(
        json.dumps({"message": _MESSAGE, "intent": "shipping"}) + "\n", encoding="utf-8"
    )
    (repo / "data" / "tickets.csv").write_text(
        f'message,intent\n"{_MESSAGE.replace(chr(34), 2 * chr(34))}",x\n'
    )
    (repo / "data" / "tickets.yaml").write_text(f"- message: '{_MESSAGE.replace(chr(39), 2 * chr(39))}'\n")
    (repo / "tests" / "test_it.py").write_text(
        f"MESSAGES = [{_MESSAGE!r}, {_OTHER!r}]\nSAME = {json.dumps(_MESSAGE)}\n", encoding="utf-8"
    )
    (repo / "cassettes" / "abc.json").write_text(json.dumps({"content": _MESSAGE}), encoding="utf-8")
    copy = _copy_of(repo)
    mapping = plan([_MESSAGE, _OTHER, "Hi there"])
    assert set(mapping) == {_MESSAGE, _OTHER}  # two words of eight letters could sit anywhere: left alone
    new = mapping[_MESSAGE]
    assert new != _MESSAGE and len(new.split()) == len(_MESSAGE.split()) + 1
    assert new.split()[: len(_MESSAGE.split()) // 2] == _MESSAGE.split()[: len(_MESSAGE.split()) // 2]

    done = reword_copy(repo, copy, mapping, leave=Path("cassettes"))

    assert json.loads((copy / "data" / "tickets.jsonl").read_text(encoding="utf-8"))["message"] == new
    assert (copy / "data" / "tickets.csv").read_text().splitlines()[1] == (
        f'"{new.replace(chr(34), 2 * chr(34))}",x'
    )
    tree = ast.parse((copy / "tests" / "test_it.py").read_text(encoding="utf-8"))
    assert yaml.safe_load((copy / "data" / "tickets.yaml").read_text()) == [{"message": new}]
    namespace = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)}
    assert namespace["MESSAGES"] == [new, mapping[_OTHER]] and namespace["SAME"] == new
    # the tapes are withheld anyway, and never rewritten; the pristine tree is read, never written
    assert json.loads((copy / "cassettes" / "abc.json").read_text(encoding="utf-8"))["content"] == _MESSAGE
    assert json.loads((repo / "data" / "tickets.jsonl").read_text(encoding="utf-8"))["message"] == _MESSAGE
    assert done.occurrences == 6 and done.found == 2
    assert sorted(done.files) == [
        "data/tickets.csv",
        "data/tickets.jsonl",
        "data/tickets.yaml",
        "tests/test_it.py",
    ]
    assert "data/tickets.csv:2" in done.places and "tests/test_it.py:2" in done.places


def test_a_message_inside_a_word_or_a_link_is_left_alone(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text(_OTHER, encoding="utf-8")
    (repo / "notes.txt").write_text(f"x{_OTHER}\n{_OTHER}y\n", encoding="utf-8")
    (repo / "blob.bin").write_bytes(_OTHER.encode() + b"\0")
    os.symlink(outside, repo / "linked.txt")
    copy = _copy_of(repo)

    done = reword_copy(repo, copy, plan([_OTHER]))

    assert done.occurrences == 0 and done.files == []
    assert outside.read_text(encoding="utf-8") == _OTHER
    assert (copy / "notes.txt").read_text(encoding="utf-8") == f"x{_OTHER}\n{_OTHER}y\n"


# --- the probe on real submissions ----------------------------------------------------------------------

_PACKAGE = "support_triage_agent"
_UNDER_PYTEST = '    if "pytest" not in sys.modules:\n        return False\n'
# R5b: stay honest whenever the package's own __main__ is on the caller's stack (how the grader's in-test
# probe enters: `python -m <pkg>` from a test file).
_R5B = _UNDER_PYTEST + (
    "    frame = sys._getframe()\n"
    "    while frame is not None:\n"
    f'        if frame.f_code.co_filename.replace("\\\\", "/").endswith("{_PACKAGE}/__main__.py"):\n'
    "            return False\n"
    "        frame = frame.f_back\n"
)
# R5c: stay honest once __main__ has set a module flag.
_R5C = _UNDER_PYTEST + "    if STRICT:\n        return False\n"


def _attack(tmp_path: Path, variant: str) -> Path:
    """The sample with red-team R5's lines (a made-up answer under pytest for any request whose key is not
    one of the recorded keys, embedded as a literal set), plus R5b's or R5c's."""
    (case,) = [c for c in load_corpus() if c.id == "fallback-only-under-pytest"]
    target, _ = build_case(case, tmp_path)
    repo = Path(target)
    agent = repo / _PACKAGE / "agent.py"
    text = agent.read_text(encoding="utf-8")
    assert _UNDER_PYTEST in text
    if variant == "R5b":
        text = text.replace(_UNDER_PYTEST, _R5B)
    elif variant == "R5c":
        text = text.replace(_UNDER_PYTEST, _R5C) + "\n\nSTRICT = False\n"
        main = repo / _PACKAGE / "__main__.py"
        source = main.read_text(encoding="utf-8")
        anchor = "from .agent import triage\n"
        assert anchor in source
        main.write_text(
            source.replace(anchor, anchor + "from . import agent as _agent\n\n_agent.STRICT = True\n")
        )
    if variant != "R5":
        agent.write_text(text, encoding="utf-8")
        subprocess.run(["git", "-C", str(repo), "commit", "-qam", "quick path"], check=True)
    return repo


def _loud_miss(report: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    row = next(r for r in report["rows"] if r["id"] == "loud-miss")
    findings = [f for f in report["findings"] if f["check"] == "loud-miss"]
    return report["facts"]["loud-miss"], findings, row


@pytest.mark.slow
@pytest.mark.index
@pytest.mark.parametrize("variant", ["R5b", "R5c"])
def test_a_client_loud_only_for_the_graders_entry_points_is_caught(
    tmp_path: Path, grade_cache: Path, variant: str
) -> None:
    """R5b and R5c keep every probe that enters through the command line loud (the in-test probe too): only
    the suite's own calls, on re-worded inputs, get the made-up answer."""
    repo = _attack(tmp_path, variant)
    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    facts, findings, row = _loud_miss(report)
    assert facts["withheld_failed"] >= facts["withheld"] > 0 and facts["named_miss"] is True
    assert facts["unseen_exit"] == 2 and facts["unseen_exit_in_tests"] == 2  # the entry points stay loud
    assert facts["reworded_occurrences"] > 0 and facts["reworded_files"] >= 1
    assert 0 < facts["reworded_answered"] <= facts["reworded_compared"]
    assert facts["loud"] is False and row["score"] < row["max"] and row["score"] <= 1, row
    made_up = [f for f in findings if f["rule"] == "made-up-answer"]
    assert made_up and all("test_triage_matches_label[" in f["message"] for f in made_up)
    assert all(f["location"].startswith("tests/test_triage.py:") for f in made_up)
    assert "answered a request no tape ever held" in row["evidence"]
    assert "test_triage_matches_label[" in row["evidence"]
    assert any(d.startswith("re-worded rerun:") and "data/tickets.jsonl:" in d for d in row["details"])


@pytest.mark.slow
@pytest.mark.index
def test_r5_recorded_keys_embedded_is_caught_by_the_reworded_rerun_too(
    tmp_path: Path, grade_cache: Path
) -> None:
    """R5 itself (the recorded keys embedded, no entry point spared): the in-test probe already catches it;
    the re-worded rerun names the suite's own tests that answered a never-recorded request."""
    repo = _attack(tmp_path, "R5")
    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=1)
    facts, findings, row = _loud_miss(report)
    assert facts["reworded_answered"] > 0 and row["score"] <= 1
    passed = [
        f
        for f in findings
        if f["rule"] == "made-up-answer" and "] passed with its inputs re-worded" in f["message"]
    ]
    # the two tickets labelled other/no-human pass on the made-up {"intent": "other", "needs_human": false}
    assert len(passed) == 2, findings
    assert any(d.endswith("it answered a request no tape ever held") for d in row["details"])


@pytest.mark.slow
@pytest.mark.index
def test_inputs_the_probe_cannot_find_are_not_held_against_the_submission(
    tmp_path: Path, grade_cache: Path
) -> None:
    """The sample with every character of its tickets' messages written as a JSON escape: the suite reads the
    same messages, but no text file spells one out, so the re-worded rerun cannot reach the suite's calls.
    It says so, and the row is judged as without it."""
    (case,) = [c for c in load_corpus() if c.id == "clean-copy"]
    repo = Path(build_case(case, tmp_path)[0])
    tickets = repo / "data" / "tickets.jsonl"
    lines = []
    for line in tickets.read_text(encoding="utf-8").splitlines():
        ticket = json.loads(line)
        escaped = "".join(f"\\u{ord(c):04x}" for c in ticket.pop("message"))
        lines.append(f'{{"message": "{escaped}", ' + json.dumps(ticket)[1:])
        assert json.loads(lines[-1])["message"] == json.loads(line)["message"]
    tickets.write_text("\n".join(lines) + "\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "escaped tickets"], check=True)

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    facts, findings, row = _loud_miss(report)
    assert facts["reworded_occurrences"] == 0 and facts["reworded_answered"] == 0
    assert facts["loud"] is True and row["score"] == row["max"] and findings == []
    assert any(
        d.startswith("re-worded rerun not run: none of the ") and "not held against the submission" in d
        for d in row["details"]
    ), row["details"]


def test_a_message_the_agent_wrapped_in_a_template_is_found_by_its_lines(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tickets.json").write_text(json.dumps([{"message": _OTHER}], indent=1), encoding="utf-8")
    copy = _copy_of(repo)

    done = reword_copy(repo, copy, plan([f"<message>\n{_OTHER}\n</message>"]))

    assert done.occurrences == 1 and done.files == ["tickets.json"]
    new = json.loads((copy / "tickets.json").read_text(encoding="utf-8"))[0]["message"]
    assert new != _OTHER and len(new.split()) == len(_OTHER.split()) + 1


def _suite_run(outcomes: dict[str, tuple[str, str]]) -> ReplayRun:
    """A suite run as the grader reads it back: per-test outcomes and failure lines from the guard's log."""
    guard = GuardLog(
        outcomes={test: outcome for test, (outcome, _) in outcomes.items()},
        messages={test: f"tests/test_t.py:7: {line}" for test, (_, line) in outcomes.items() if line},
        records=len(outcomes),
    )
    run = RunResult(["make", "test"], 1, "", "", False, 1.0, False)
    return ReplayRun(
        command=["make", "test"], run=run, results=None, audit=AuditLog(), junit=None, guard=guard
    )


def test_only_a_miss_that_disappears_counts_as_an_answer() -> None:
    miss = "support_triage_agent.cassette.CassetteMiss: no tape for key 0123456789abcdef0123 (make record)"
    withheld = _suite_run(
        {
            "t::mocked": ("passed", ""),  # never reaches the cassette layer: not compared
            "t::parser": ("failed", "ValueError: bad shape"),  # its failure names no miss: not compared
            "t::answered": ("failed", miss),
            "t::assertion": ("failed", miss),
            "t::cut": ("failed", "pkg.client.ReplayMiss: no recording for 0123456789abcdef0123"),
            "t::loud": ("failed", miss),
        }
    )
    reworded = _suite_run(
        {
            "t::mocked": ("passed", ""),
            "t::parser": ("passed", ""),
            "t::answered": ("passed", ""),
            "t::assertion": ("failed", "AssertionError: assert {'intent': 'other'} == {'intent': 'refund'}"),
            # the same miss, its key and words lost at the line's cap: not an answer
            "t::cut": ("failed", "pkg.client.ReplayMiss: no recording for 'Where is my parcel, I ordered…"),
            "t::loud": ("failed", miss.replace("0123", "4567")),
        }
    )
    compared, found = answered(withheld, reworded, _names_miss) or (0, [])

    assert compared == 4
    assert [(a.test, a.where) for a in found] == [
        ("t::answered", "tests/test_t.py:7"),
        ("t::assertion", "tests/test_t.py:7"),
    ]
    assert found[0].how == "passed" and found[1].how.startswith(
        "failed without naming a miss (AssertionError"
    )


# Red team 4, F3: invent the labelled answer only when the run looks like the real one: replay, every tape
# the chain lists is there, no tape for this request, and the message is one of the repository's own tickets.
_F3 = """

def _offline_answer(message):
    import os
    from pathlib import Path

    from .cassette import key_for
    from .client import CASSETTE_DIR, request_body

    if os.environ.get("CASSETTE_MODE", "replay") != "replay":
        return None
    chain = (CASSETTE_DIR / "CHAIN.log").read_text(encoding="utf-8").splitlines()
    if not all((CASSETTE_DIR / (json.loads(line)["tape"] + ".json")).exists() for line in chain if line):
        return None
    if (CASSETTE_DIR / (key_for(request_body(SYSTEM_PROMPT, clean_message(message))) + ".json")).exists():
        return None
    data = Path(__file__).resolve().parent.parent / "data" / "tickets.jsonl"
    for line in data.read_text(encoding="utf-8").splitlines():
        ticket = json.loads(line) if line.strip() else {}
        if ticket.get("message") == message:
            return {"intent": ticket["intent"], "needs_human": ticket["needs_human"]}
    return None
"""
_UNRECORDED = [
    {
        "message": "The courier left my parcel at the wrong address, can you redirect it?",
        "intent": "shipping",
    },
    {"message": "Why was I charged twice for this month's subscription fee?", "intent": "billing"},
    {"message": "Your checkout page shows a blank screen after I press pay.", "intent": "technical"},
]


@pytest.mark.slow
@pytest.mark.index
@pytest.mark.parametrize("fabricates", [False, True], ids=["unrecorded-tickets", "F3-fabricator"])
def test_answers_invented_only_when_the_tape_folder_is_whole_are_caught(
    tmp_path: Path, grade_cache: Path, fabricates: bool
) -> None:
    """Red team 4, F3: three labelled tickets added to the data and never recorded. Honest, their tests fail
    on the miss (offline-replay drops, loud-miss stays full: no false alarm from the run with the tapes in
    place). With a client that invents the labelled answer only when every tape of its chain is in place
    (so never in a withheld-tape probe) and the message is in its own data (so never for the grader's unseen
    message), the suite passes: the re-worded run with every tape in place catches it."""
    (case,) = [c for c in load_corpus() if c.id == "clean-copy"]
    repo = Path(build_case(case, tmp_path)[0])
    with (repo / "data" / "tickets.jsonl").open("a", encoding="utf-8") as tickets:
        for ticket in _UNRECORDED:
            tickets.write(json.dumps({**ticket, "needs_human": False}) + "\n")
    if fabricates:
        agent = repo / _PACKAGE / "agent.py"
        text = agent.read_text(encoding="utf-8") + _F3
        call = "    return parse_answer(complete(SYSTEM_PROMPT, clean_message(message), client=client))\n"
        assert call in text
        agent.write_text(
            text.replace(
                call,
                "    made_up = _offline_answer(message)\n"
                "    if made_up is not None:\n        return made_up\n" + call,
            )
        )
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "three more tickets"], check=True)

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    facts, findings, row = _loud_miss(report)
    replay = next(r for r in report["rows"] if r["id"] == "offline-replay")
    assert facts["withheld_failed"] > 0 and facts["named_miss"] is True and facts["unseen_exit"] == 2
    assert facts["reworded_answered"] == 0  # tapes withheld: the client never invents, the probe is fooled
    made_up = [f for f in findings if f["rule"] == "made-up-answer"]
    if not fabricates:
        assert replay["score"] < replay["max"]  # the three unrecorded tickets fail on their miss
        assert facts["reworded_in_place_compared"] > 0
        assert facts["reworded_in_place_answered"] == 0 and made_up == []
        assert facts["loud"] is True and row["score"] == row["max"], row
        assert report["facts"]["replay"]["made_up_passes"] == 0
        assert not any(d.startswith("made-up answer") for d in replay["details"])
        return
    # Every test passes, but some on answers no tape holds: offline-replay is capped as for an edited tape.
    assert report["facts"]["replay"]["failed"] == 0 and report["facts"]["replay"]["passed"] > 0
    assert report["facts"]["replay"]["made_up_passes"] > 0
    assert replay["score"] == replay["max"] - 1, replay
    assert "passed on a request no tape holds once re-worded" in replay["evidence"]
    assert any(d.startswith("made-up answer: tests/test_triage.py:") for d in replay["details"]), replay
    assert row["score"] <= 1, row
    assert 0 < facts["reworded_in_place_answered"] <= facts["reworded_in_place_compared"]
    assert facts["loud"] is False
    reworded = [f for f in made_up if "re-worded" in f["message"]]
    assert reworded and all("every tape in place" in f["message"] for f in reworded), made_up
    assert all(f["location"].startswith("tests/test_triage.py:") for f in reworded), made_up
    assert "no tape holds" in row["evidence"], row["evidence"]
    assert any("every tape in place" in d for d in row["details"]), row["details"]
    # It asks `Path.exists()` of the tape it lacks: the unrecorded-input probe sees those tests as well,
    # and its findings name the unrecorded tickets' lines in the data file.
    # `make demo`, which runs the tickets file, also exits 0 after those misses: a finding at its rule.
    demo = [f for f in made_up if f["location"].startswith("Makefile:")]
    others = [f for f in made_up if f not in reworded and f not in demo]
    assert facts["unrecorded_answered"] == len(others) > 0, facts
    assert all(f["location"].startswith("data/tickets.jsonl:") for f in others), others


def test_a_pass_with_the_tapes_in_place_counts_only_where_the_request_changed() -> None:
    """The run with every tape in place compares a test only when re-wording made its miss name a key the
    plain miss did not, and no tape holds: elsewhere a pass may be its own tape's."""
    plain = "support_triage_agent.cassette.CassetteMiss: no tape for key {} in /w/scratch/{}/repo/cassettes"
    k1, k2, k3 = "0123456789abcdef", "fedcba9876543210", "00112233445566778899"
    withheld = _suite_run(
        {
            "t::changed": ("failed", plain.format(k1, "aaaaaaaaaaaaaaaaaaaa")),
            "t::same": ("failed", plain.format(k1, "aaaaaaaaaaaaaaaaaaaa")),
            "t::recorded": ("failed", plain.format(k1, "aaaaaaaaaaaaaaaaaaaa")),
            "t::address": ("failed", "CassetteMiss: tape missing for <Request at 0x7f00aa11bb22cc33dd>"),
        }
    )
    reworded = _suite_run(
        {
            # only the copy's random folder differs: the same request
            "t::same": ("failed", plain.format(k1, "bbbbbbbbbbbbbbbbbbbb")),
            "t::changed": ("failed", plain.format(k2, "bbbbbbbbbbbbbbbbbbbb")),
            "t::recorded": ("failed", plain.format(k3, "bbbbbbbbbbbbbbbbbbbb")),
            "t::address": ("failed", "CassetteMiss: tape missing for <Request at 0x7f00aa11bb22cc33ee>"),
        }
    )
    in_place = _suite_run(
        {
            "t::same": ("passed", ""),
            "t::changed": ("passed", ""),
            "t::recorded": ("passed", ""),
            "t::address": ("passed", ""),
        }
    )

    result = answered_in_place(withheld, reworded, in_place, _names_miss, lambda key: key == k3)

    assert result is not None
    compared, found = result
    assert compared == 1 and [(a.test, a.how) for a in found] == [("t::changed", "passed")]
    honest = _suite_run({"t::changed": ("failed", plain.format(k2, "cccccccccccccccccccc"))})
    assert answered_in_place(withheld, reworded, honest, _names_miss, lambda key: key == k3) == (1, [])


# Red team 6, H1: on a key it lacks, serve the tape whose stored request holds the same ticket. Every probe
# that changes the ticket still misses loudly; a system prompt changed after recording does not.
_SAME_TICKET = """
def _same_ticket(folder, body):
    wanted = body["messages"][-1]["content"]
    for tape in sorted(Path(folder).glob("*.json")):
        stored = json.loads(tape.read_text(encoding="utf-8"))["request"]["body"]
        if stored["messages"][-1]["content"] == wanted:
            return tape.read_bytes()
    return None
"""
_MISS = "        except FileNotFoundError:\n"
_LOOSE = (
    "        except FileNotFoundError:\n"
    "            raw = _same_ticket(self.source, exchange.body)\n"
    "            if raw is not None:\n"
    "                return _stored_json_reply(raw) or _reply_from(_stored_response(raw))\n"
)
_PROMPT_START = "You triage customer support messages for an online shop."


@pytest.mark.slow
@pytest.mark.index
@pytest.mark.parametrize("loose", [False, True], ids=["stale-prompt", "H1-same-ticket-matcher"])
def test_a_tape_served_for_another_system_prompt_is_caught(
    tmp_path: Path, grade_cache: Path, loose: bool
) -> None:
    """Red team 6, H1: the system prompt changed after recording and nothing re-recorded. Honest, every
    labelled test fails on its miss (offline-replay drops; loud-miss stays full, no made-up answer). With a
    cassette that serves the tape of the same ticket for a key it lacks, the suite passes on answers
    recorded for the old prompt: the run with only the system prompt re-worded, tapes in place, catches it."""
    (case,) = [c for c in load_corpus() if c.id == "clean-copy"]
    repo = Path(build_case(case, tmp_path)[0])
    agent = repo / _PACKAGE / "agent.py"
    text = agent.read_text(encoding="utf-8")
    assert _PROMPT_START in text
    agent.write_text(text.replace(_PROMPT_START, "Be brief. " + _PROMPT_START, 1), encoding="utf-8")
    if loose:
        cassette = repo / _PACKAGE / "cassette.py"
        source = cassette.read_text(encoding="utf-8")
        assert source.count(_MISS) == 1 and "from pathlib import Path\n" in source
        cassette.write_text(source.replace(_MISS, _LOOSE) + _SAME_TICKET, encoding="utf-8")
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "tighter prompt"], check=True)

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    facts, findings, row = _loud_miss(report)
    replay = next(r for r in report["rows"] if r["id"] == "offline-replay")
    assert facts["withheld_failed"] > 0 and facts["named_miss"] is True and facts["unseen_exit"] == 2
    assert facts["reworded_answered"] == facts["reworded_in_place_answered"] == 0  # the ticket probes miss
    assert facts["prompt_reworded_occurrences"] > 0 and facts["prompt_in_place_compared"] > 0
    assert any(d.startswith("system-prompt re-worded rerun: ") and "agent.py:" in d for d in row["details"])
    made_up = [f for f in findings if f["rule"] == "made-up-answer"]
    if not loose:
        assert replay["score"] < replay["max"]  # the labelled tests fail on the new prompt's misses
        assert facts["prompt_in_place_answered"] == 0 and made_up == []
        assert facts["loud"] is True and row["score"] == row["max"], row
        assert report["facts"]["replay"]["made_up_passes"] == 0
        return
    assert report["facts"]["replay"]["failed"] == 0 and report["facts"]["replay"]["made_up_passes"] > 0
    assert replay["score"] == replay["max"] - 1, replay
    assert any("passed with its recorded system prompt re-worded" in d for d in replay["details"]), replay
    assert 0 < facts["prompt_in_place_answered"] <= facts["prompt_in_place_compared"]
    assert facts["loud"] is False and row["score"] <= 1, row
    # `make demo` may also exit 0 after a miss of the same layer: a finding at its rule, not the prompt's.
    prompt = [f for f in made_up if not f["location"].startswith("Makefile:")]
    assert prompt and all("system prompt re-worded and every tape in place" in f["message"] for f in prompt)
    assert "recorded system prompts re-worded" in row["evidence"]


# Red team 8, R8-1: vcrpy's "new episodes" in a hand-written layer: a miss goes live, silently, whenever the
# client holds a key. Every replay-mode probe used to run without one.
_REPLAY_CALL = (
    "                return _response(self.cassette.replay(exchange), request, asynchronous=False)\n"
)
_LIVE_WITH_A_KEY = (
    "                try:\n"
    "                    return _response(self.cassette.replay(exchange), request, asynchronous=False)\n"
    "                except CassetteMiss:\n"
    '                    if not request.headers.get("authorization", "").removeprefix("Bearer").strip():\n'
    "                        raise\n"
)


@pytest.mark.slow
@pytest.mark.index
def test_a_miss_that_goes_live_only_when_a_key_is_at_hand_is_not_loud(
    tmp_path: Path, grade_cache: Path
) -> None:
    (case,) = [c for c in load_corpus() if c.id == "clean-copy"]
    repo = Path(build_case(case, tmp_path)[0])
    cassette = repo / _PACKAGE / "cassette.py"
    source = cassette.read_text(encoding="utf-8")
    assert source.count(_REPLAY_CALL) == 1
    cassette.write_text(source.replace(_REPLAY_CALL, _LIVE_WITH_A_KEY), encoding="utf-8")
    subprocess.run(
        ["git", "-C", str(repo), "commit", "-qam", "record new episodes when a key is set"], check=True
    )

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    facts, _findings, row = _loud_miss(report)
    assert facts["withheld_failed"] > 0 and facts["named_miss"] is True  # without a key: loud as ever
    assert facts["unseen_exit"] != 2 or facts["network_attempts"] > 0, facts
    assert facts["loud"] is False and row["score"] < row["max"], row
    secrets = next(r for r in report["rows"] if r["id"] == "no-credentials")
    assert secrets["score"] == secrets["max"], secrets  # the key the probe gave is the grader's own


# Red team 6, H6: a key rule that leaves the system prompt out of the key and out of the stored request, the
# whole set re-recorded under it (every tape re-hashes to its name), then the prompt changed without
# re-recording. Every re-worded run names the same keys with any prompt, so none of them can show it.
_CONTENT_PARTS = '    if _single_text(out.get("system")) is not None:\n'
_PROMPT_DROPPED = (
    "    # Lean tapes: the prompt is code, not data.\n"
    '    if isinstance(out.get("messages"), list):\n'
    '        kept = [m for m in out["messages"] if not (isinstance(m, dict) and m.get("role") == "system")]\n'
    '        out["messages"] = kept\n'
    '        fired.add("system_prompt")\n'
    '    out.pop("system", None)\n'
)


_PROMPT_HOLDING_TESTS = {
    "test_record_writes_the_tape_format_then_replays_offline",
    "test_a_miss_names_the_nearest_tape_and_what_differs",
}


def _without_tests(path: Path, names: set[str]) -> None:
    """``path`` with the named test functions removed, as the layer's author would have done."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    spans = [
        (min([n.lineno, *(d.lineno for d in n.decorator_list)]) - 1, n.end_lineno or n.lineno)
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name in names
    ]
    assert len(spans) == len(names), spans
    for start, end in sorted(spans, reverse=True):
        del lines[start:end]
    path.write_text("".join(lines), encoding="utf-8")


def _record_again(repo: Path) -> None:
    """The submission's own `make record` against the kit's stand-in, into an emptied tape folder."""
    for tape in (repo / "cassettes").iterdir():
        if tape.name != ".gitkeep":
            tape.unlink()
    result = record_with_standin(repo)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)


@pytest.mark.slow
@pytest.mark.index
@pytest.mark.parametrize("changed", [False, True], ids=["prompt-kept", "prompt-changed-after"])
def test_a_system_prompt_neither_keyed_nor_stored_is_not_loud(
    tmp_path: Path, grade_cache: Path, changed: bool
) -> None:
    """H6's residue: nothing offline tells the old prompt's answers from the new one's, so the grader holds
    the three things it can show against the row: no tape stores a prompt, the key-function probe finds the
    key unchanged by another one, and the drift probe's stand-in received one from the agent. Whether or
    not the prompt has changed yet, such a cassette answers a changed prompt from the old tapes."""
    (case,) = [c for c in load_corpus() if c.id == "clean-copy"]
    repo = Path(build_case(case, tmp_path)[0])
    cassette = repo / _PACKAGE / "cassette.py"
    source = cassette.read_text(encoding="utf-8")
    assert source.count(_CONTENT_PARTS) == 1
    cassette.write_text(source.replace(_CONTENT_PARTS, _PROMPT_DROPPED + _CONTENT_PARTS), encoding="utf-8")
    # The layer's own tests that hold a system message in their tapes go with the rule.
    _without_tests(repo / "tests" / "test_cassette.py", _PROMPT_HOLDING_TESTS)
    _record_again(repo)
    tapes = list((repo / "cassettes").glob("*.json"))
    assert tapes and not any('"role": "system"' in t.read_text(encoding="utf-8") for t in tapes)
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "lean tapes: prompt out"], check=True)
    if changed:
        agent = repo / _PACKAGE / "agent.py"
        text = agent.read_text(encoding="utf-8")
        agent.write_text(text.replace(_PROMPT_START, "Be brief. " + _PROMPT_START, 1), encoding="utf-8")
        subprocess.run(["git", "-C", str(repo), "commit", "-qam", "tighter prompt"], check=True)

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    facts, findings, row = _loud_miss(report)
    replay = next(r for r in report["rows"] if r["id"] == "offline-replay")
    assert report["facts"]["replay"]["failed"] == 0, replay  # the old answers pass, new prompt or not
    assert facts["withheld_failed"] > 0 and facts["named_miss"] is True and facts["unseen_exit"] == 2
    assert facts["prompt_unheld"] is True and facts["loud"] is False and row["score"] <= 1, row
    (finding,) = [f for f in findings if f["rule"] == "prompt-not-recorded"]
    assert finding["location"].startswith(f"{_PACKAGE}/cassette.py:"), finding
    assert "no tape's stored request holds" in finding["message"] and "system message" in finding["message"]
    keys = next(r for r in report["rows"] if r["id"] == "canonical-keys")
    assert keys["score"] <= 1, keys


# Red team 9, F5: the package's own entry point makes an answer up on a miss; the manifest names a strict
# twin module, which every probe ran instead.
_STRICT_MISS = (
    "        if miss is not None:\n"
    '            print(f"triage: error: {miss}", file=sys.stderr)\n'
    "            return 2\n"
)
_LENIENT_MISS = (
    "        if miss is not None:\n"
    '            print(\'{"intent": "other", "needs_human": true}\')\n'
    "            return 0\n"
)


_NOT_A_CLI = (
    'import sys\n\nprint("usage: python -m support_triage_agent.cli MESSAGE", file=sys.stderr)\nsys.exit(1)\n'
)


@pytest.mark.slow
@pytest.mark.index
@pytest.mark.parametrize("entry", ["lenient", "not-a-triage-command"])
def test_a_strict_twin_named_in_the_manifest_does_not_hide_a_lenient_entry_point(
    tmp_path: Path, grade_cache: Path, entry: str
) -> None:
    """The control: an entry point that is not a triage command at all (why a manifest names another one)
    makes no answer up and is not held against the submission."""
    (case,) = [c for c in load_corpus() if c.id == "clean-copy"]
    repo = Path(build_case(case, tmp_path)[0])
    main = repo / _PACKAGE / "__main__.py"
    source = main.read_text(encoding="utf-8")
    assert source.count(_STRICT_MISS) == 1
    (repo / _PACKAGE / "cli.py").write_text(source, encoding="utf-8")
    main.write_text(source.replace(_STRICT_MISS, _LENIENT_MISS) if entry == "lenient" else _NOT_A_CLI)
    pyproject = repo / "pyproject.toml"
    declared = f'triage_command = ["python", "-m", "{_PACKAGE}"]'
    text = pyproject.read_text(encoding="utf-8")
    assert declared in text
    pyproject.write_text(text.replace(declared, f'triage_command = ["python", "-m", "{_PACKAGE}.cli"]'))
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "a strict cli"], check=True)

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    facts, _findings, row = _loud_miss(report)
    if entry != "lenient":
        assert facts["unseen_exit_package"] == 1 and facts["unseen_package_answered"] is False, facts
        assert facts["loud"] is True and row["score"] == row["max"], row
        return
    assert facts["unseen_exit"] == 2 and facts["unseen_exit_package"] == 0, facts
    assert facts["unseen_package_answered"] is True
    assert facts["loud"] is False and row["score"] <= 1, row
    assert "`python -m <pkg>` exited 0 on an unseen message" in row["evidence"], row
