"""A row's detail lines: each fact once, and many alike folded into one line a reviewer can act on."""

from __future__ import annotations

from grader.checks import CheckResult, Finding
from grader.rubric import load_rubric, score


def _offline_replay_details(result: CheckResult) -> list[str]:
    facts = {
        "passed": 3, "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0, "deselected": 0, "xfail_norun": 0,
        "hidden_failures": 0, "tamper_hooks": 0, "forged": False, "exit_abnormal": False,
        "network_attempts": 1, "first_network_attempt": "tests/t.py:9", "timed_out": False,
        "duration": 0.1, "command": "make test", "summary": "x",
    }  # fmt: skip
    result.facts = {**facts, **result.facts}
    (row,) = [r for r in score(load_rubric(), {"replay": result}) if r.id == "offline-replay"]
    return row.details


def test_a_finding_the_check_already_described_is_shown_once() -> None:
    result = CheckResult(
        facts={},
        findings=[Finding("network-attempt", "socket.refused api.openai.com:443", "tests/t.py:9")],
        details=["connection attempt at tests/t.py:9: socket.refused api.openai.com:443"],
    )
    assert _offline_replay_details(result) == [
        "connection attempt at tests/t.py:9: socket.refused api.openai.com:443"
    ]


def test_a_finding_no_detail_describes_is_added_and_duplicates_go() -> None:
    result = CheckResult(
        facts={},
        findings=[Finding("tamper-hook", "rewrites reports", "conftest.py:3")],
        details=["skipped: t (why)", "skipped: t (why)"],
    )
    assert _offline_replay_details(result) == ["skipped: t (why)", "conftest.py:3: rewrites reports"]


def test_many_lines_alike_but_for_the_place_become_one_with_a_count() -> None:
    findings = [Finding("no-endpoint", "tape names no endpoint", f"tapes/t{i:02d}.json:1") for i in range(24)]
    details = _offline_replay_details(CheckResult(facts={}, findings=findings, details=["suite ran"]))
    assert details == [
        "suite ran",
        "tapes/t00.json:1: tape names no endpoint (+23 more like it: tapes/t01.json:1, tapes/t02.json:1, "
        "tapes/t03.json:1 and 20 more)",
    ]


def test_three_alike_lines_stay_as_they_are() -> None:
    findings = [Finding("no-endpoint", "tape names no endpoint", f"tapes/t{i}.json:1") for i in range(3)]
    details = _offline_replay_details(CheckResult(facts={}, findings=findings))
    assert details == [f"tapes/t{i}.json:1: tape names no endpoint" for i in range(3)]


def test_paths_into_the_workspace_and_the_environment_cache_are_made_submission_relative() -> None:
    from grader.details import submission_relative

    root = "/tmp/grade-abc123"
    assert submission_relative(f"expected {root}/repo/cassettes/k.json", root) == "expected cassettes/k.json"
    assert submission_relative(f"{root}/scratch/withheld-tapes/tests/t.py:3", root) == "tests/t.py:3"
    cached = "/var/cache/cassette-grader/9f/lib/python3.11/site-packages/llm/__init__.py:365"
    assert submission_relative(f"raised at {cached}", root) == "raised at site-packages/llm/__init__.py:365"
    assert submission_relative("tests/t.py:3 api.openai.com:443", root) == "tests/t.py:3 api.openai.com:443"
