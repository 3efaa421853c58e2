"""Bounded at scale: a suite that hangs costs one timeout, and a grade has an overall budget.

Real submissions (the sample solution plus a test that never returns), graded by the real `grade` command.
Nothing here measures wall time: the report's notes name every sandboxed run that reached its timeout and
every run the grader skipped or stopped, and those are what the tests count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.builders import commit, sample_copy
from tests.helpers.sample_marks import default_scores

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _hanging(dest: Path) -> Path:
    repo = commit(sample_copy(dest), "take-home submission")
    (repo / "tests" / "test_zz_hang.py").write_text(
        "import time\n\n\ndef test_waits_for_ever():\n    while True:\n        time.sleep(1)\n",
        encoding="utf-8",
    )
    return commit(repo, "one more test")


def _grade(repo: Path, *options: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(repo), "--format", "json", "--quiet", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _row(report: dict[str, Any], row_id: str) -> dict[str, Any]:
    return next(row for row in report["rows"] if row["id"] == row_id)


@pytest.mark.index
def test_a_hanging_suite_costs_one_timeout_and_its_probes_are_skipped_with_a_note(tmp_path: Path) -> None:
    report = _grade(_hanging(tmp_path / "hangs"), "--timeout", "8")
    notes = report.get("notes", [])
    # The drift probe runs the triage command, never the suite: its lanes (several tickets, each a Python
    # start, within the same 8 s) may time out on a loaded machine, which says nothing about the hang.
    timeouts = [n for n in notes if n.startswith("timed out after") and not n.endswith(": drift probe")]
    # One sandboxed run of the suite reached its timeout: the replay suite. The loud-miss rerun of the same
    # suite (started alongside it, --jobs 2) was stopped when the suite timed out, not left to reach its own.
    assert timeouts == ["timed out after 8 s: replay"], notes
    replay = _row(report, "offline-replay")
    assert replay["score"] == 0 and report["facts"]["replay"]["timed_out"] is True
    skipped = [note for note in notes if "probes that run the suite again were skipped" in note]
    assert len(skipped) == 1 and skipped[0].endswith("rows left unassessed: loud-miss"), notes
    loud = _row(report, "loud-miss")
    assert loud["status"] == "not-assessable" and "replay suite timed out" in loud["evidence"]
    # Rows that do not run the suite are still graded.
    # (model-metadata 2: the sample was recorded against the stand-in, see tests/helpers/sample_marks.py)
    assert _row(report, "model-metadata")["score"] == default_scores()["model-metadata"]
    assert _row(report, "canonical-keys")["score"] == 3
    # The canary record probe runs the suite too: skipped, so no-credentials cannot say "no leak" (R7-2).
    creds = _row(report, "no-credentials")
    assert report["facts"]["secrets"]["canary_skipped"] is True
    assert creds["score"] == creds["max"] - 1, creds
    assert "canary record probe was not run" in creds["evidence"], creds


@pytest.mark.index
def test_the_grade_budget_stops_what_it_cannot_finish_and_names_the_rows(tmp_path: Path) -> None:
    report = _grade(_hanging(tmp_path / "hangs"), "--timeout", "120", "--budget", "20")
    notes = report.get("notes", [])
    assert not [note for note in notes if note.startswith("timed out after")]  # the budget, not a timeout
    budget = [note for note in notes if "budget of 20 s" in note]
    assert budget, notes
    marker = "rows left unassessed: "
    unassessed = {row_id for note in budget if marker in note for row_id in note.split(marker)[1].split(", ")}
    assert "offline-replay" in unassessed
    replay = _row(report, "offline-replay")
    assert replay["status"] == "not-assessable" and "budget of 20 s" in replay["evidence"]
    # Static rows are still scored; every row is either scored or named as unassessed with the reason.
    assert _row(report, "model-metadata")["score"] == default_scores()["model-metadata"]
    for row in report["rows"]:
        assert (
            row["status"] in ("scored", "manual") or row["id"] in unassessed or "install" in row["evidence"]
        )


def test_budget_is_an_option_of_grade_and_grade_batch() -> None:
    for args in (["--help"], ["batch", "--help"]):
        done = subprocess.run(
            [sys.executable, "-m", "grader", *args], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert "--budget" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "grader", ".", "--budget", "0"], cwd=REPO, capture_output=True, text=True
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_grade_whose_budget_ran_out_before_the_answer_rerun_gives_no_full_replay_marks(
    tmp_path: Path,
) -> None:
    # Red team 16: a layer that hangs on a miss in its committed tape folder only (its own miss tests use
    # other folders) spends the budget in loud-miss's withheld-tape reruns; the perturbed-answer rerun that
    # would look for answers made up on a hit never ran, and offline-replay kept 3 without it.
    repo = commit(sample_copy(tmp_path / "hangmiss"), "take-home submission")
    layer = repo / "support_triage_agent" / "cassette.py"
    source = layer.read_text(encoding="utf-8")
    missed = "        except FileNotFoundError:\n"
    at = source.index(missed, source.index("    def replay(self, exchange"))
    hang = (
        "            if Path(self.source).resolve().name == 'cassettes' and 'pytest' in sys.modules:\n"
        "                import time\n"
        "                while True:\n"
        "                    time.sleep(1)\n"
    )
    source = source[: at + len(missed)] + hang + source[at + len(missed) :]
    if "\nimport sys\n" not in source:
        source = source.replace("\nimport json\n", "\nimport json\nimport sys\n", 1)
    layer.write_text(source, encoding="utf-8")
    commit(repo, "wait for the tape")

    report = _grade(repo, "--jobs", "1", "--timeout", "15", "--budget", "45")

    replay = _row(report, "offline-replay")
    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["passed"] > 0, facts
    assert facts["answers_skipped"] is True, facts
    assert replay["score"] == 2 and "perturbed-answer rerun was not run" in replay["evidence"], replay
