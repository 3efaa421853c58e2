"""The drift probe (`model-drift` row): real agents, graded by the real grader, against the real stand-in.

Each agent is a small git repository (tests/drift_agents.py) graded with the default rubric's own
`model-drift` row. Its tapes hold one ticket per drift kind of the shipped `drifted` profile, sent plain and
streamed, chosen with the profile's own decision, so every kind is met over both wire formats. What is
asserted is what a reviewer reads: the row's score, the per-kind facts, and findings naming ticket and kind.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from grader.grading import grade
from grader.rubric import load_rubric
from grader.standin_drift import Drifter
from grader.standin_profile import load_profile, resolve_profile
from tests.drift_agents import BASE_TEXT, KINDS, PATHS, choose_tickets, make_agent, request_body
from tests.helpers.bake import bake
from tests.helpers.git import GIT_ENV

_GIT = {**GIT_ENV, "PATH": "/usr/bin:/bin"}

# Kinds whose answer carries no label: the right thing is to fail loudly.
NO_LABEL = {"truncated", "refusal", "empty"}
EXPECTED: dict[str, dict[str, str]] = {
    "correct": {kind: ("loud" if kind in NO_LABEL else "handled") for kind in KINDS},
    "default": {
        kind: ("handled" if kind in ("slow", "extra_field", "split_stream") else "violations")
        for kind in KINDS
    },
    "raising": {kind: ("handled" if kind in ("slow", "split_stream") else "loud") for kind in KINDS},
}
# Red team 19, F2: the same guesses, printed, then exit 1 with a warning: still violations, never loud.
EXPECTED["default-loud"] = EXPECTED["default"]


def _drift_rubric(tickets: int | None = None) -> Any:
    """The default rubric's own model-drift row, alone; ``tickets``: room for every chosen ticket."""
    rubric = load_rubric()
    row = next(r for r in rubric.rows if r.id == "model-drift")
    thresholds = {**rubric.thresholds, **({"drift_tickets": tickets} if tickets else {})}
    return replace(rubric, rows=(row,), thresholds=thresholds)


def _row(report: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in report["rows"] if r["id"] == "model-drift")


@pytest.fixture(scope="module")
def tickets() -> dict[str, dict[str, list[str]]]:
    return {provider: choose_tickets(provider) for provider in ("openai", "anthropic")}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("parser", ["correct", "default", "default-loud", "raising"])
def test_every_drift_kind_is_judged_by_what_the_agent_did_with_it(
    tmp_path: Path, grade_cache: Path, tickets: dict[str, dict[str, list[str]]], provider: str, parser: str
) -> None:
    chosen = tickets[provider]
    messages = [m for kind in KINDS for m in chosen[kind]]
    repo = make_agent(tmp_path, provider, parser, messages)
    report = grade(
        str(repo), rubric=_drift_rubric(len(messages)), timeout=120, cache_root=grade_cache, jobs=2
    )
    facts = report["facts"]["drift"]
    row = _row(report)

    assert facts["probe"] == "ran", facts
    assert facts["tickets"] == len(messages) and facts["unreached"] == 0
    assert facts["drifted"] == len(messages), "every ticket was chosen to drift"
    for kind in KINDS:
        counts = facts["kinds"][kind]
        expected = EXPECTED[parser][kind]
        assert counts["tickets"] >= len(chosen[kind]), (kind, counts)
        assert counts[expected] == len(chosen[kind]), (parser, provider, kind, counts)

    violated = sorted(k for k, v in EXPECTED[parser].items() if v == "violations")
    assert facts["violation_kinds"] == violated
    findings = [f for f in report["findings"] if f["rule"] == "drift-violation"]
    assert len(findings) == sum(len(chosen[k]) for k in violated)
    for kind in violated:  # each violation names its drift kind and its ticket, at the tape it came from
        for message in chosen[kind]:
            number = messages.index(message) + 1  # tickets are numbered in tape order, one tape each
            hits = [f for f in findings if f["message"].startswith(f"{kind} answer to ticket T{number:02d} ")]
            assert len(hits) == 1, (kind, message, findings)
            assert hits[0]["location"].startswith(f"cassettes/{number:03d}-"), hits

    if parser.startswith("default"):
        assert row["score"] == 1 if facts["violations"] * 4 > facts["drifted"] else row["score"] <= 2
        assert row["score"] < row["max"]
        assert "violation" in row["evidence"] and "T" in row["evidence"]
    else:  # handled or loud, never a guess: full marks
        assert row["score"] == row["max"], row


def test_an_agent_that_never_reaches_the_endpoint_goes_to_a_reviewer(
    tmp_path: Path, grade_cache: Path
) -> None:
    # The same agent, told to answer from a canned table instead of the endpoint: nothing drifted reached it.
    # Neither 3 (nothing was shown) nor 0 (an agent whose live mode the probe cannot find, or whose provider
    # it does not intercept, is built that way, which is not a drift failure): a reviewer reads the parser.
    repo = make_agent(tmp_path, "openai", "default", ["I want a refund for my jacket"])
    main = repo / "agent" / "__main__.py"
    main.write_text(main.read_text(encoding="utf-8").replace("raw = post(b)", "raise OSError('cached')"))
    import subprocess

    from tests.helpers.git import GIT_ENV

    subprocess.run(
        ["git", "commit", "-qam", "cache"], cwd=repo, check=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"}
    )
    report = grade(str(repo), rubric=_drift_rubric(1), timeout=120, cache_root=grade_cache, jobs=1)
    row, facts = _row(report), report["facts"]["drift"]
    assert facts["unreached"] == 1 and facts["drifted"] == 0
    assert row["status"] == "manual" and row["score"] is None, row
    assert "made no model call" in row["evidence"] and "judge by reading" in row["evidence"]


def _commit(repo: Path, old: str, new: str) -> None:
    import subprocess

    from tests.helpers.git import GIT_ENV

    main = repo / "agent" / "__main__.py"
    main.write_text(main.read_text(encoding="utf-8").replace(old, new))
    subprocess.run(
        ["git", "commit", "-qam", "change"], cwd=repo, check=True, env={**GIT_ENV, "PATH": "/usr/bin:/bin"}
    )


def test_an_agent_that_refuses_the_record_mode_scores_nothing_not_manual(
    tmp_path: Path, grade_cache: Path
) -> None:
    # Red-team R10: a command that fails (or hangs) in the probe's record mode before calling anything, and
    # answers otherwise, kept the row out of the total as "manual", raising the percentage above an honest
    # agent's that met a drift.
    repo = make_agent(tmp_path, "openai", "raising", ["I want a refund for my jacket"])
    refuse = (
        "import os\n"
        "        if os.environ.get('CASSETTE_MODE') == 'record':\n"
        "            raise OSError('refused')\n"
        "        print(json.dumps({'intent': 'refund', 'needs_human': False}))\n"
        "        return 0"
    )
    _commit(repo, "raw = post(b)", refuse)
    report = grade(str(repo), rubric=_drift_rubric(1), timeout=120, cache_root=grade_cache, jobs=1)
    row, facts = _row(report), report["facts"]["drift"]
    assert facts["unreached"] == 1 and facts["drifted"] == 0
    assert row["status"] != "manual" and row["score"] == 0, row
    assert "failed on 1 of them before calling" in row["evidence"], row["evidence"]


def test_an_agent_that_fails_the_same_without_the_record_switches_goes_to_a_reviewer(
    tmp_path: Path, grade_cache: Path
) -> None:
    # The independent A/triagebot: its prompt wraps the message (<message>...</message>), so the recorded
    # user message, given back to its command, is an input it never recorded: a loud miss (exit 2) in every
    # mode, and its live switch (TRIAGEBOT_LIVE=1) is nowhere the probe looks. Not a refusal of the probe:
    # a reviewer reads the parser, as for any agent the probe cannot reach.
    repo = make_agent(tmp_path, "openai", "raising", ["I want a refund for my jacket"])
    _commit(repo, "raw = post(b)", "sys.stderr.write('no tape for this request\\n')\n        return 2")
    report = grade(str(repo), rubric=_drift_rubric(1), timeout=120, cache_root=grade_cache, jobs=1)
    row, facts = _row(report), report["facts"]["drift"]
    assert facts["unreached"] == 1 and facts["drifted"] == 0
    assert row["status"] == "manual" and row["score"] is None, row
    assert "failed the same way in plain replay" in row["evidence"] and "exit 2 both times" in row["evidence"]


def test_the_record_targets_own_variables_reach_the_triage_command(
    tmp_path: Path, grade_cache: Path, tickets: dict[str, dict[str, list[str]]]
) -> None:
    # Not built on the template: no [tool.takehome], the agent answers from a canned table unless its own
    # variable says record, which only its Makefile's record recipe sets. The probe reads it from there.
    chosen = tickets["openai"]
    messages = [*chosen["code_fence"], *chosen["refusal"]]
    repo = make_agent(tmp_path, "openai", "correct", messages)
    main = repo / "agent" / "__main__.py"
    main.write_text(
        main.read_text(encoding="utf-8").replace(
            "    try:\n        raw = post(b)\n",
            "    if os.environ.get('AGENT_TAPES') != 'record':\n"
            "        print(json.dumps({'intent': 'other', 'needs_human': False}))\n"
            "        return 0\n"
            "    try:\n        raw = post(b)\n",
        ),
        encoding="utf-8",
    )
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8").split("[tool.takehome]")[0], encoding="utf-8")
    (repo / "Makefile").write_text("record:\n\t@AGENT_TAPES=record python -m pytest -q\n", encoding="utf-8")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=_GIT)
    subprocess.run(["git", "commit", "-qm", "own record switch"], cwd=repo, check=True, env=_GIT)

    report = grade(
        str(repo), rubric=_drift_rubric(len(messages)), timeout=120, cache_root=grade_cache, jobs=1
    )
    row, facts = _row(report), report["facts"]["drift"]
    # Beyond the messages' own draws, the cover run sends the kinds they did not reach, one run each.
    assert facts["unreached"] == 0 and facts["drifted"] == facts["tickets"] > len(messages), facts
    assert facts["kinds"]["code_fence"]["handled"] >= len(chosen["code_fence"])
    assert facts["kinds"]["refusal"]["loud"] >= len(chosen["refusal"])
    assert row["score"] == row["max"]
    assert any("the record target's own AGENT_TAPES=record" in d for d in row["details"]), row["details"]
    assert not any(d.count("CASSETTE_MODE=record") > 1 for d in row["details"]), row["details"]


def _undrifted_then_drifted(provider: str) -> tuple[str, str]:
    """A message the drifted profile answers plainly the first time, with a drift the second: (it, kind)."""
    profile = load_profile(resolve_profile("drifted"))
    for n in range(1, 5000):
        message = f"{BASE_TEXT} (order again {n})"
        canonical = json.dumps(request_body(provider, message), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{PATHS[provider]}\n{canonical}".encode()).digest()
        drifter = Drifter(profile)
        first, second = drifter.choose(digest, _plain), drifter.choose(digest, _plain)
        if first is None and second is not None and second.kind in ("code_fence", "prose_before", "refusal"):
            return message, second.kind
    raise AssertionError("no such message")


def _plain(drift: Any) -> bool:
    return drift.kind != "split_stream"


def test_fewer_recorded_inputs_than_the_limit_are_run_again_and_meet_a_drift(
    tmp_path: Path, grade_cache: Path
) -> None:
    # One recorded input whose first answer is plain: once, it shows nothing about the parser (drifted 0,
    # level 0). Run again up to the limit, the stand-in draws its drift anew, as a model does.
    message, kind = _undrifted_then_drifted("openai")
    repo = make_agent(tmp_path, "openai", "default", [message])
    report = grade(str(repo), rubric=_drift_rubric(3), timeout=120, cache_root=grade_cache, jobs=2)
    row, facts = _row(report), report["facts"]["drift"]
    assert facts["unreached"] == 0, facts
    lines = [d for d in row["details"] if d.startswith("cassettes/") and d.split(" ")[1] == "ticket"]
    ids = [line.split(" ticket ")[1].split(" ")[0] for line in lines]
    assert ids[:3] == ["T01", "T01.2", "T01.3"], "\n".join(lines)
    assert "(no drift): correct" in lines[0], lines[0]
    assert f"ticket T01.2 ({kind})" in lines[1], lines[1]
    assert facts["drifted"] >= 1 and kind in facts["kinds"], facts
    # Red team 27, F3: the draws alone met two or three kinds, always the same ones for these requests. The
    # cover run sends every other kind of the profile once (T01.c1, ...), so a parser that defaults only on
    # the kinds a submission's draws never reach is met anyway: every kind that applies to a plain
    # (not streamed) answer was sent, `slow` aside.
    profile = load_profile(resolve_profile("drifted"))
    plain = {d.kind for d in profile.drifts if d.kind not in ("split_stream", "slow")}  # slow: time only
    assert plain <= set(facts["kinds"]), sorted(plain - set(facts["kinds"]))
    assert all(i.startswith("T01.c") for i in ids[3:]) and len(ids) == facts["tickets"], ids
    assert any("its draws did not reach" in d for d in row["details"]), row["details"]


def test_a_submission_with_nothing_to_run_scores_zero_with_the_reason(
    tmp_path: Path, grade_cache: Path
) -> None:
    # The untouched template: a triage command, but no tape, so no recorded input to re-run.
    baked = bake(tmp_path, project_name="Drift Bake")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "bake"]):
        subprocess.run(["git", *args], cwd=baked, check=True, env=_GIT)
    report = grade(str(baked), rubric=_drift_rubric(12), timeout=120, cache_root=grade_cache, jobs=1)
    row, facts = _row(report), report["facts"]["drift"]
    assert facts["probe"].startswith("not available: no recorded request")
    assert row["score"] == 0 and row["score"] < row["max"]
    assert "no recorded request" in row["evidence"]


def test_the_sample_solution_handles_or_refuses_every_drifted_answer(grade_cache: Path) -> None:
    sample = Path(__file__).resolve().parents[1] / "sample_solution"
    report = grade(str(sample), rubric=_drift_rubric(), timeout=120, cache_root=grade_cache, jobs=1)
    row, facts = _row(report), report["facts"]["drift"]
    assert facts["drifted"] > 0 and facts["violations"] == 0, facts
    assert row["score"] == row["max"]
    # A refusal or a tool call is named, not a TypeError from parsing nothing.
    details = "\n".join(row.get("details", []))
    assert "TypeError" not in details


_GOES_LIVE = "        return exchange.live if self.replay_until is not None else self.forwards\n"
_NEW_EPISODES = (
    '        if self.forwards and (self.source / f"{exchange.key}.json").is_file():\n'
    "            return False  # record only what is missing (vcrpy's new_episodes)\n" + _GOES_LIVE
)


# CASSETTE_DIR takes the new tapes only; the committed ones stay where replays are read.
_SCRATCH_BOTH = "                self.dir = self.source = Path(scratch)\n"
_SCRATCH_WRITES = "                self.dir = Path(scratch)\n"


def test_a_record_mode_that_replays_what_it_has_still_meets_the_drifted_model(
    tmp_path: Path, grade_cache: Path
) -> None:
    """Red team 9: a layer whose record mode serves a recorded request from its tape and records only what
    is missing never called the stand-in on the recorded tickets, so the row went to a reviewer and left the
    total. The probe's copy holds no committed tape: the agent meets the drifted model (the sample's parser
    handles every drift, so the row is scored in full)."""
    from grader.selftest import load_corpus
    from grader.selftest.runner import build_case

    (case,) = [c for c in load_corpus() if c.id == "clean-copy"]
    repo = Path(build_case(case, tmp_path)[0])
    cassette = repo / "support_triage_agent" / "cassette.py"
    source = cassette.read_text(encoding="utf-8")
    assert source.count(_GOES_LIVE) == 1 and source.count(_SCRATCH_BOTH) == 1
    source = source.replace(_GOES_LIVE, _NEW_EPISODES).replace(_SCRATCH_BOTH, _SCRATCH_WRITES)
    cassette.write_text(source, encoding="utf-8")
    subprocess.run(["git", "commit", "-qam", "new episodes"], cwd=repo, check=True, env=_GIT)

    report = grade(str(repo), rubric=_drift_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    row, facts = _row(report), report["facts"]["drift"]
    assert facts["unreached"] == 0 and facts["drifted"] > 0, facts
    assert row["status"] == "scored" and row["score"] == row["max"], row
