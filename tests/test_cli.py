"""The `grade` command: exit codes, one-line errors, `grade checks`, --output and --fail-under."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from tests.helpers.tape import A_TAPE

PASSING_SUITE = {
    **A_TAPE,
    "tests/test_ok.py": """
        def test_one():
            assert 1 + 1 == 2


        def test_two():
            assert "tape".upper() == "TAPE"
        """,
}


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("grade: error: "), lines[0]
    return lines[0]


def test_missing_target_is_bad_input(grade_cli, tmp_path: Path) -> None:
    done = grade_cli([str(tmp_path / "no-such-submission")], cwd=tmp_path)

    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert "no-such-submission" in line
    assert done.stdout == ""


def test_invalid_rubric_is_reported_with_its_line_before_acquiring(grade_cli, tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(
        "version: 1\n"
        "name: broken\n"
        "rows:\n"
        "  - id: offline-replay\n"
        "    title: Suite passes\n"
        "    weight: 3\n"
        "    check: no-such-check\n"
        "    levels:\n"
        "      3: passed > 0\n"
        "      0: true\n",
        encoding="utf-8",
    )
    # The target does not exist either: the rubric error must win, proving the rubric is read first.
    done = grade_cli(["--rubric", str(rubric), str(tmp_path / "missing")], cwd=tmp_path)

    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert f"{rubric}:7:" in line
    assert "no-such-check" in line


def test_usage_errors_are_one_line_exit_2(grade_cli, tmp_path: Path) -> None:
    for args in (["--timeout", "soon", "x"], ["--fail-under", "120", "x"], ["--format", "pdf", "x"], []):
        done = grade_cli(args, cwd=tmp_path)
        assert done.returncode == 2, args
        _one_error_line(done.stderr)


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({}, id="empty-folder"),
        pytest.param(
            {"main.c": "int main(void) { return 0; }\n", "Makefile": "all:\n\tcc main.c\n"}, id="c-code"
        ),
    ],
)
def test_a_target_that_is_no_submission_is_refused_not_scored(
    grade_cli, tmp_path: Path, files: dict[str, str]
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    for name, text in files.items():
        (target / name).write_text(text, encoding="utf-8")
    out = tmp_path / "report.json"

    done = grade_cli(["--output", str(out), str(target)], cwd=tmp_path)

    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert "not a submission" in line and "no Python project" in line and str(target) in line
    assert not out.exists()


def test_output_that_is_a_directory_is_refused(grade_cli, tmp_path: Path) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    done = grade_cli(["--output", str(out), str(tmp_path)], cwd=tmp_path)

    assert done.returncode == 2
    assert "is a directory" in _one_error_line(done.stderr)
    assert list(out.iterdir()) == []


def test_grade_checks_lists_the_catalogue(grade_cli, tmp_path: Path) -> None:
    done = grade_cli(["checks"], cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "replay: " in done.stdout
    assert "make-targets: " in done.stdout
    for fact in ("network_attempts", "timed_out", "record_refuses_without_key", "summary"):
        assert fact in done.stdout
    # Every check the default rubric names is listed, built or still a manual placeholder.
    for check_id in ("secrets", "loud-miss", "metadata", "hygiene", "keys", "replay-doc", "boundary"):
        assert f"\n{check_id}: " in f"\n{done.stdout}"

    markdown = grade_cli(["checks", "--format", "markdown"], cwd=tmp_path)
    assert markdown.returncode == 0
    assert "### `replay`" in markdown.stdout


def test_grade_checks_notes_a_folder_named_checks(grade_cli, tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    done = grade_cli(["checks"], cwd=tmp_path)

    assert done.returncode == 0
    assert "replay: " in done.stdout
    assert "grade ./checks" in done.stderr


@pytest.mark.index
@pytest.mark.slow
def test_fail_under_exit_codes_and_atomic_output(
    grade_cli, make_submission, grade_cache, tmp_path: Path
) -> None:
    repo = make_submission(PASSING_SUITE)
    out = tmp_path / "report.json"
    common = ["--cache-dir", str(grade_cache), "--format", "json", "--timeout", "120", str(repo)]

    done = grade_cli(["--output", str(out), "--fail-under", "0", *common], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    report = json.loads(out.read_text(encoding="utf-8"))
    # Written like any file the user writes (the umask applies): shareable, not mkstemp's 0600.
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    assert report["schema"] == "grade-report/1"
    # Progress: one line per step with its elapsed time.
    for step in ("acquire", "install", "replay"):
        assert any(line.startswith(f"[{step}] ") and "s " in line for line in done.stderr.splitlines()), step
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report.json")] == []

    # A FIFO (like /dev/null: not a regular file) is written to, never replaced; a symlink keeps its target.
    fifo, link = tmp_path / "report.fifo", tmp_path / "latest.json"
    os.mkfifo(fifo)
    link.symlink_to(out)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text(encoding="utf-8")), daemon=True)
    reader.start()
    assert grade_cli(["--output", str(fifo), *common], cwd=tmp_path).returncode == 0
    reader.join(timeout=30)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert json.loads(read[0])["schema"] == "grade-report/1"
    out.unlink()
    assert grade_cli(["--output", str(link), *common], cwd=tmp_path).returncode == 0
    assert link.is_symlink() and json.loads(out.read_text(encoding="utf-8"))["schema"] == "grade-report/1"

    # Placeholder rows are manual and count toward neither side, but make-targets scores 0 here.
    assert report["total"]["percent"] < 100
    below = grade_cli(["--fail-under", "100", *common], cwd=tmp_path)
    assert below.returncode == 3, below.stderr
    assert json.loads(below.stdout)["schema"] == "grade-report/1"
    assert "below --fail-under 100%" in below.stderr


def test_a_relative_cache_dir_grades_like_an_absolute_one(
    grade_cli, make_submission, grade_cache, tmp_path: Path
) -> None:
    """Red-team R3: `--cache-dir cache` (relative) was handed to sandboxed commands that run elsewhere, so
    the venv was not found and an honest suite scored 0 for the reviewer's path."""
    repo = make_submission(PASSING_SUITE)
    common = ["--format", "json", "--timeout", "120", str(repo)]
    absolute = grade_cli(["--cache-dir", str(grade_cache), *common], cwd=tmp_path)
    relative = grade_cli(["--cache-dir", os.path.relpath(grade_cache, tmp_path), *common], cwd=tmp_path)
    assert absolute.returncode == relative.returncode == 0, relative.stderr
    scores = [
        {row["id"]: row.get("score") for row in json.loads(done.stdout)["rows"]}
        for done in (absolute, relative)
    ]
    assert scores[0] == scores[1]
    assert json.loads(relative.stdout)["facts"]["replay"]["passed"] == 2
