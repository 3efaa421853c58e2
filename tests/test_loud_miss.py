"""The loud-miss probes at `--jobs 2` (started before the first check, beside the replay suite) judge a
submission exactly as at `--jobs 1` (run inside the check, one after another)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from grader import sandbox
from grader.grading import grade
from grader.rubric import load_rubric
from grader.selftest import load_corpus
from grader.selftest.runner import build_case
from tests.helpers.git import GIT_ENV

pytestmark = [pytest.mark.slow, pytest.mark.index]


def _case(case_id: str, dest: Path) -> tuple[str, dict[str, str]]:
    (case,) = [c for c in load_corpus() if c.id == case_id]
    return build_case(case, dest)


def _loud_miss(report: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    row = next(r for r in report["rows"] if r["id"] == "loud-miss")
    findings = [f for f in report["findings"] if f["check"] == "loud-miss"]
    return report["facts"]["loud-miss"], findings, row


def test_a_silent_fallback_is_judged_the_same_at_both_jobs(tmp_path: Path, grade_cache: Path) -> None:
    target, planted = _case("silent-fallback", tmp_path)
    reports = {
        jobs: grade(target, rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=jobs)
        for jobs in (2, 1)
    }
    (facts, findings, row), again = (_loud_miss(reports[2]), _loud_miss(reports[1]))
    # The made-up answer hides the miss: an unseen message gets an answer instead of exit 2.
    assert facts["loud"] is False and facts["withheld"] > 0
    assert facts["unseen_exit"] == 0
    assert facts["silent_fallbacks"] == 1
    # The planted handler, and `make demo` (which goes through it) exiting 0 with every tape withheld.
    assert [f["location"] for f in findings] == [f"{planted['file']}:{planted['line']}", "Makefile:27"]
    assert facts["demo_withheld_exit"] == 0
    assert row["score"] <= 1
    assert (facts, findings, row["score"], row["evidence"]) == (
        again[0],
        again[1],
        again[2]["score"],
        again[2]["evidence"],
    )


def test_the_sample_fails_loudly_at_both_jobs(tmp_path: Path, grade_cache: Path) -> None:
    target, _ = _case("clean-copy", tmp_path)
    reports = {
        jobs: grade(target, rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=jobs)
        for jobs in (2, 1)
    }
    (facts, findings, row), again = (_loud_miss(reports[2]), _loud_miss(reports[1]))
    assert facts["loud"] is True and facts["named_miss"] is True and facts["unseen_exit"] == 2
    assert facts["unseen_exit_in_tests"] == 2
    assert facts["withheld_failed"] == facts["withheld"] > 0 and facts["network_attempts"] == 0
    # The re-worded rerun reached the suite's own inputs (data/tickets.jsonl), and every test that failed
    # naming a miss with the tapes withheld fails naming one again on the re-worded messages.
    assert facts["reworded_occurrences"] > 0 and facts["reworded_files"] > 0
    assert facts["reworded_compared"] == facts["withheld_failed"] and facts["reworded_answered"] == 0
    assert any(d.startswith("re-worded rerun:") and "data/tickets.jsonl:1" in d for d in row["details"])
    assert findings == [] and row["score"] == 3
    assert (facts, row["evidence"]) == (again[0], again[2]["evidence"])


def test_an_answer_made_up_only_under_pytest_is_caught(tmp_path: Path, grade_cache: Path) -> None:
    """Red-team R5: the client invents an answer only under pytest and only for a request no tape was ever
    recorded for. The withheld-tape rerun fails loudly (those keys were recorded) and the command line exits
    2 (no pytest there): only the command run from a test of the suite shows the made-up answer."""
    target, _planted = _case("fallback-only-under-pytest", tmp_path)
    report = grade(target, rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)
    facts, _findings, row = _loud_miss(report)
    assert facts["withheld_failed"] >= facts["withheld"] > 0 and facts["named_miss"] is True
    assert facts["unseen_exit"] == 2 and facts["silent_fallbacks"] == 0
    assert facts["unseen_exit_in_tests"] == 0 and facts["loud"] is False
    assert row["score"] <= 1, row
    assert "inside a test instead of 2" in row["evidence"], row["evidence"]
    assert any("inside a test of the suite exited 0 after printing" in d for d in row.get("details", []))


# Red team 5, G6: on a miss, ask the network through a program that is not Python (the red team's was curl;
# `getent`, in every glibc system, resolves a name the same way) before raising the miss: the audit hook sees
# nothing, the run's network namespace counts the packets it had no route for.
_SECOND_SOURCE = (
    "            import subprocess\n"
    '            subprocess.run(["getent", "ahosts", "api.openai.com"], capture_output=True, check=False)\n'
)


def test_a_fallback_through_a_program_that_is_not_python_is_not_loud(
    tmp_path: Path, grade_cache: Path
) -> None:
    if shutil.which("getent") is None or sandbox.isolation().network != "namespace+pytest-socket":
        pytest.skip("needs getent and a network namespace (the counter is the namespace's)")
    target, _ = _case("clean-copy", tmp_path)
    cassette = Path(target) / "support_triage_agent" / "cassette.py"
    text = cassette.read_text(encoding="utf-8")
    anchor = "            nearest = self._nearest(exchange)\n            self._log_miss(exchange, nearest)\n"
    assert anchor in text
    cassette.write_text(text.replace(anchor, _SECOND_SOURCE + anchor), encoding="utf-8")
    subprocess.run(["git", "-C", target, "commit", "-qam", "ask a second source on a miss"], check=True)

    report = grade(target, rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=2)

    facts, findings, row = _loud_miss(report)
    assert facts["named_miss"] is True and facts["network_attempts"] > 0 and facts["loud"] is False
    assert row["score"] <= 1, row
    assert findings and all(f["rule"] == "network-fallback" for f in findings), findings
    assert any("from a process the audit hook does not see" in d for d in row["details"]), row["details"]


def test_a_suite_that_cannot_start_is_never_said_to_have_passed(tmp_path: Path, grade_cache: Path) -> None:
    # Red team 13: `make test` asked for a plugin the environment lacks (`-p xdist`): no test ran, and the
    # evidence said "with 24 tapes withheld, the suite still passed".
    target, _ = _case("clean-copy", tmp_path)
    makefile = Path(target) / "Makefile"
    text = makefile.read_text(encoding="utf-8")
    recipe = "CASSETTE_MODE=replay $(PYTHON) -m pytest"
    assert recipe in text
    makefile.write_text(text.replace(recipe, recipe + " -p no_such_plugin_here", 1), encoding="utf-8")
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "-C", target, "commit", "-qam", "xdist"], check=True, capture_output=True, env=env)
    report = grade(target, rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=1)
    facts, _findings, row = _loud_miss(report)
    assert facts["withheld_passed"] == 0 and facts["loud"] is False
    assert "ran no test" in row["evidence"] and "still passed" not in row["evidence"], row["evidence"]
