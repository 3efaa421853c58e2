"""The hiring team's path through the real `grade` command: a batch file with the wrong header, a misspelt
rubric key, and a re-score whose new rubric is wrong in one of two different ways."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.test_batch import run_grade
from tests.test_shard_merge import cheap_rubric

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (ROOT / "rubric" / "default.yaml").read_text()
SAMPLE = ROOT / "sample_solution"


@pytest.mark.parametrize(
    ("name", "text", "found"),
    [
        ("round.csv", "name,url\nann,https://example.com/ann.git\n", "name, url"),
        ("round.txt", "# round 3\nemail,target\nann@x,./ann\n", "email, target"),
        ("round.csv", "url\n./ann\n", "url"),
    ],
)
def test_csv_header_without_candidate_is_refused_naming_line_and_columns(
    tmp_path: Path, name: str, text: str, found: str
) -> None:
    listing = tmp_path / name
    listing.write_text(text)
    line = next(n for n, raw in enumerate(text.splitlines(), 1) if not raw.startswith("#"))
    done = run_grade(["batch", str(listing), "--output", str(tmp_path / "out")], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        f"grade: error: {listing}:{line}: the CSV header has no 'candidate' column (found: {found}); "
        "expected columns: candidate,target (or candidate,repo); or list one target per line with no header\n"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "shown"), [("candidate;target\nann;./ann\n", "';'"), ("candidate\ttarget\n", "tabs")]
)
def test_a_csv_separated_by_something_else_says_so(tmp_path: Path, text: str, shown: str) -> None:
    listing = tmp_path / "round.csv"
    listing.write_text(text)
    done = run_grade(["batch", str(listing), "--output", str(tmp_path / "out")], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        f"grade: error: {listing}:1: the CSV is separated by {shown}, not commas; save it with commas "
        "(candidate,target or candidate,repo)\n"
    )
    assert not (tmp_path / "out").exists()


def _misspelt() -> tuple[str, int, int]:
    """The default rubric with `weight` misspelt in the first row and an unknown check in the second."""
    text = DEFAULT.replace("    weight: 3\n", "    wieght: 3\n", 1).replace(
        "check: secrets", "check: secret", 1
    )
    lines = text.splitlines()
    return text, lines.index("    wieght: 3") + 1, lines.index("    check: secret") + 1


def test_every_rubric_problem_is_listed_with_its_line_and_a_suggestion(tmp_path: Path) -> None:
    text, wieght, check = _misspelt()
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(text)
    done = run_grade(["--rubric", str(rubric), str(tmp_path / "no-such-target")], cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"grade: error: {rubric}:{wieght}: unknown key 'wieght' in row 'offline-replay' "
        "(did you mean 'weight'?)",
        f"grade: error: {rubric}:{check}: row 'no-credentials': unknown check 'secret'; known checks: "
        + re.search(r"known checks: (.*)$", done.stderr.splitlines()[1]).group(1),
    ]
    assert "missing the required key" not in done.stderr


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One stored run graded with the two-row rubric (tape metadata, REPLAY.md)."""
    work = tmp_path_factory.mktemp("stored")
    rubric = work / "cheap.yaml"
    rubric.write_text(cheap_rubric())
    run = work / "run"
    done = run_grade(["--rubric", str(rubric), "--store", str(run), "--quiet", str(SAMPLE)], cwd=work)
    assert done.returncode == 0, done.stderr
    return run


@pytest.mark.index
def test_rescore_tells_an_invalid_rubric_from_one_needing_unstored_facts(
    stored_run: Path, tmp_path: Path
) -> None:
    before = (stored_run / "report.json").read_bytes()
    typo = tmp_path / "typo.yaml"
    typo.write_text(cheap_rubric().replace("    weight: 2\n", "    wieght: 2\n", 1))
    invalid = run_grade(["rescore", str(stored_run), "--rubric", str(typo)], cwd=tmp_path)
    assert invalid.returncode == 2
    assert "unknown key 'wieght'" in invalid.stderr and "(did you mean 'weight'?)" in invalid.stderr
    assert "stored" not in invalid.stderr and "re-grade" not in invalid.stderr

    needs = tmp_path / "needs.yaml"
    needs.write_text(DEFAULT)  # valid, but its rows need checks this run never ran
    unstored = run_grade(["rescore", str(stored_run), "--rubric", str(needs)], cwd=tmp_path)
    assert unstored.returncode == 2
    assert (
        "check 'replay' is not in the stored runs" in unstored.stderr
        and "unknown check" not in unstored.stderr
    )
    assert f"the new rubric is valid, but it needs checks or facts the runs stored in {stored_run} lack" in (
        unstored.stderr
    )
    assert (stored_run / "report.json").read_bytes() == before and not (stored_run / "history").exists()


@pytest.mark.index
def test_a_plain_folder_reports_no_commit(stored_run: Path) -> None:
    # stored_run graded sample_solution, which is a folder of this repository, not a repository itself.
    report = json.loads((stored_run / "report.json").read_text())
    assert report["commit"] is None
    assert "(no commit)" in (stored_run / "report.md").read_text()
    assert json.loads((stored_run / "run.json").read_text())["commit"] is None
