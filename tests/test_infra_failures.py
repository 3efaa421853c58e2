"""The grader's own environment failing is never the submission's 0: a full disk (a small tmpfs in a private
mount namespace, for real) makes the rows it affects not-assessable with the reason, and a report is always
written, also when the grader itself fails."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import jsonschema
import pytest

from grader import cli, grading
from grader.rubric import load_rubric
from grader.schemas import load_schema
from tests.conftest import REPO_ROOT, MakeSubmission
from tests.helpers.tape import A_TAPE

SAMPLE = REPO_ROOT / "sample_solution"
NO_SPACE = "no space left on device"


def _can_mount() -> bool:
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return probe.returncode == 0


needs_mount = pytest.mark.skipif(not _can_mount(), reason="needs root and `unshare -m` to mount a tmpfs")


def _grade_on_small_disk(
    args: Sequence[str], *, disk: Path, size: str, tmpdir: bool, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """`python -m grader ARGS` with a ``size`` tmpfs mounted at ``disk`` (seen by this process only).

    ``tmpdir``: the grader's workspace (TMPDIR) is on the small disk; point --cache-dir there to fill the
    environment cache instead.
    """
    disk.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    env.pop("GRADE_DEBUG", None)
    if tmpdir:
        env["TMPDIR"] = str(disk)
    script = 'mount -t tmpfs -o "size=$1,mode=0755" tmpfs "$2" && shift 2 && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", size, str(disk), sys.executable, "-m", "grader", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _valid_report(path: Path) -> dict:
    report = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(load_schema("grade-report")).validate(report)
    return report


def _rows(report: dict) -> dict[str, dict]:
    return {row["id"]: row for row in report["rows"]}


def _one_line_no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr


# A suite that honestly needs scratch space: 4 MiB in pytest's tmp_path (under the run's TMPDIR).
_NEEDS_ROOM = {
    **A_TAPE,
    "tests/test_room.py": """
        def test_writes_four_mebibytes(tmp_path):
            path = tmp_path / "blob.bin"
            path.write_bytes(b"x" * (4 * 1024 * 1024))
            assert path.stat().st_size == 4 * 1024 * 1024


        def test_small():
            assert 1 + 1 == 2
        """,
}


# --- a full disk --------------------------------------------------------------------------------------------


@pytest.mark.index
@pytest.mark.slow
@needs_mount
def test_full_workspace_during_the_run_is_not_assessable_never_zero(
    tmp_path: Path, make_submission: MakeSubmission, grade_cache: Path, grade_cli
) -> None:
    repo = make_submission(_NEEDS_ROOM, name="needs-room")
    base = ["--cache-dir", str(grade_cache), "--format", "json", "--timeout", "120", "-q"]

    # On a normal disk the suite passes: the submission is honest.
    roomy = tmp_path / "roomy.json"
    done = grade_cli([*base, "-o", str(roomy), str(repo)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _rows(_valid_report(roomy))["offline-replay"]["score"] == 3

    # With a 2 MiB workspace disk it cannot write its 4 MiB: the grader's disk, not the candidate's 0.
    out = tmp_path / "report.json"
    done = _grade_on_small_disk(
        [*base, "-o", str(out), str(repo)], disk=tmp_path / "small", size="2m", tmpdir=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    _one_line_no_traceback(done.stderr)
    row = _rows(_valid_report(out))["offline-replay"]
    assert row["status"] == "not-assessable" and row["score"] is None, row
    assert f"not assessable: {NO_SPACE}: workspace" in row["evidence"], row
    assert str(tmp_path / "small") in row["evidence"]


@pytest.mark.index
@pytest.mark.slow
@needs_mount
def test_no_room_for_the_workspace_at_all_exits_4_with_a_report(tmp_path: Path, grade_cache: Path) -> None:
    out = tmp_path / "report.json"
    done = _grade_on_small_disk(
        ["--cache-dir", str(grade_cache), "--format", "json", "-o", str(out), str(SAMPLE)],
        disk=tmp_path / "tiny",
        size="64k",
        tmpdir=True,
        cwd=tmp_path,
    )
    assert done.returncode == cli.EXIT_NOT_ASSESSABLE, done.stderr
    _one_line_no_traceback(done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"grade: not assessable: {NO_SPACE}: workspace {tmp_path / 'tiny'}"), last
    report = _valid_report(out)
    assert report["rows"] and all(r["status"] == "not-assessable" for r in report["rows"])
    assert all(NO_SPACE in r["evidence"] for r in report["rows"])
    assert report["total"] == {"points": 0, "max": 0, "percent": 0}


@pytest.mark.slow
@needs_mount
def test_a_full_store_disk_is_named_as_the_store_not_the_workspace(tmp_path: Path, grade_cache: Path) -> None:
    # Red team 13: the stored logs filled a small store disk, and the reason blamed a roomy workspace.
    disk = tmp_path / "tiny"
    done = _grade_on_small_disk(
        ["--cache-dir", str(grade_cache), "-q", "--store", str(disk / "stored"), str(SAMPLE)],
        disk=disk,
        size="96k",
        tmpdir=False,
        cwd=tmp_path,
    )
    assert done.returncode == cli.EXIT_NOT_ASSESSABLE, done.stderr
    _one_line_no_traceback(done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"grade: not assessable: {NO_SPACE}: store folder {disk / 'stored'}"), last


@needs_mount
def test_a_batch_whose_output_disk_fills_before_its_summary_exits_4_in_one_line(tmp_path: Path) -> None:
    # Red team 13, F3: the batch ended with "internal error: OSError" and no word of where the disk was full.
    batch = tmp_path / "candidates.csv"
    batch.write_text(f"candidate,target\nghost,{tmp_path / 'no-such-repo'}\n", encoding="utf-8")
    disk = tmp_path / "tiny"
    done = _grade_on_small_disk(
        ["batch", str(batch), "--output", str(disk / "round"), "-q"],
        disk=disk,
        size="8k",  # two pages: the candidate's run.json, one summary file, then no room
        tmpdir=False,
        cwd=tmp_path,
    )
    assert done.returncode == cli.EXIT_NOT_ASSESSABLE, done.stderr
    _one_line_no_traceback(done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"grade: not assessable: {NO_SPACE}: output folder {disk / 'round'}"), last
    assert last.endswith("summary not written"), last


@pytest.mark.index
@pytest.mark.slow
@needs_mount
def test_batch_marks_a_candidate_without_disk_not_assessable(tmp_path: Path, grade_cache: Path) -> None:
    batch = tmp_path / "candidates.csv"
    batch.write_text(f"candidate,target\nalice,{SAMPLE}\n", encoding="utf-8")
    out = tmp_path / "round"
    done = _grade_on_small_disk(
        ["batch", str(batch), "--output", str(out), "--cache-dir", str(grade_cache), "-q"],
        disk=tmp_path / "tiny",
        size="64k",
        tmpdir=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    _one_line_no_traceback(done.stderr)
    with (out / "summary.csv").open(encoding="utf-8") as handle:
        (line,) = list(csv.DictReader(handle))
    assert line["status"] == "not assessable"
    assert NO_SPACE in line["reason"], line


@pytest.mark.slow
@needs_mount
def test_full_environment_cache_is_not_assessable_and_static_rows_still_score(tmp_path: Path) -> None:
    disk = tmp_path / "cache-disk"
    out = tmp_path / "report.json"
    # 16 KiB: not even a venv fits, so no package index is needed to run out of room.
    done = _grade_on_small_disk(
        ["--cache-dir", str(disk / "envs"), "--format", "json", "-o", str(out), str(SAMPLE)],
        disk=disk,
        size="16k",
        tmpdir=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    _one_line_no_traceback(done.stderr)
    rows = _rows(_valid_report(out))
    for row_id in ("offline-replay", "loud-miss", "make-targets"):
        assert rows[row_id]["status"] == "not-assessable", rows[row_id]
        assert f"{NO_SPACE}: environment cache {disk / 'envs'}" in rows[row_id]["evidence"]
    # Rows that read files only are not the cache's business: they are still scored.
    assert rows["replay-doc"]["status"] == "scored" and rows["replay-doc"]["score"] == 3
    assert all(r["score"] != 0 for r in rows.values()), rows


# --- an internal error still leaves a report ---------------------------------------------------------------


def _explode(repo: Path) -> None:
    raise RuntimeError("manifest reader exploded")


@pytest.fixture
def broken_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug inside the pipeline (after acquire, before any check): the kind `grade` did not expect."""
    monkeypatch.setattr(grading, "read_manifest", _explode)  # the name the pipeline calls
    monkeypatch.delenv("GRADE_DEBUG", raising=False)


@pytest.mark.usefixtures("broken_pipeline")
def test_internal_error_writes_a_report_to_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    store = tmp_path / "stored"
    code = cli.main([str(SAMPLE), "--format", "json", "-o", str(out), "-q", "--store", str(store)])
    assert code == cli.EXIT_INTERNAL
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["grade: internal error: RuntimeError: manifest reader exploded "
                   "(set GRADE_DEBUG=1 for the traceback, and please report it)"], err  # fmt: skip
    report = _valid_report(out)
    assert all(r["status"] == "not-assessable" for r in report["rows"])
    assert all("internal error in the grader: RuntimeError: manifest reader exploded" in r["evidence"]
               for r in report["rows"])  # fmt: skip
    run = json.loads((store / "run.json").read_text(encoding="utf-8"))
    assert run["status"] == "not-assessable" and "manifest reader exploded" in run["reason"]


@pytest.mark.usefixtures("broken_pipeline")
def test_internal_error_with_json_on_stdout_prints_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main([str(SAMPLE), "--format", "json", "-q"])
    assert code == cli.EXIT_INTERNAL
    captured = capsys.readouterr()
    path = tmp_path / "stdout.json"
    path.write_text(captured.out, encoding="utf-8")
    report = _valid_report(path)
    assert report["target"] == str(SAMPLE)
    assert {r["id"] for r in report["rows"]} >= {"offline-replay", "no-credentials"}
    assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.usefixtures("broken_pipeline")
def test_internal_error_with_text_on_stdout_keeps_stdout_empty(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([str(SAMPLE), "-q"]) == cli.EXIT_INTERNAL
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("grade: internal error: RuntimeError")


def test_a_cache_dir_that_is_a_file_is_not_assessable_not_a_crash(
    tmp_path: Path, make_submission: MakeSubmission, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_submission({"tests/test_x.py": "def test_x():\n    assert True\n"})
    not_a_folder = tmp_path / "cache-file"
    not_a_folder.write_text("", encoding="utf-8")
    out = tmp_path / "report.json"
    code = cli.main([str(repo), "--cache-dir", str(not_a_folder), "--format", "json", "-o", str(out), "-q"])
    assert code == cli.EXIT_OK, capsys.readouterr().err
    row = _rows(_valid_report(out))["offline-replay"]
    assert row["status"] == "not-assessable"
    assert f"cannot use the environment cache {not_a_folder}" in row["evidence"], row


# --- who failed: decided by the grader's probes, never by words in the installer's log ----------------------


def _sample_with_dependencies(tmp_path: Path, dependencies: str) -> Path:
    repo = tmp_path / "submission"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache"))
    pyproject = repo / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    assert 'dependencies = ["httpx>=0.27"]' in text
    pyproject.write_text(text.replace('dependencies = ["httpx>=0.27"]', dependencies), encoding="utf-8")
    env = {**os.environ, "GIT_AUTHOR_NAME": "c", "GIT_AUTHOR_EMAIL": "c@example.invalid",
           "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.invalid"}  # fmt: skip
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "work"]):
        subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True)
    return repo


@pytest.mark.index
def test_an_invalid_requirement_is_the_submissions_failure_not_infrastructure(
    tmp_path: Path, grade_cache: Path, grade_cli
) -> None:
    # uv's parse error for this line mentions "ssl" (pyopenssl): the old grader read that as network
    # trouble and took four rows out of the total (21/21 = 100%).
    repo = _sample_with_dependencies(tmp_path, 'dependencies = [\n  "httpx>=0.27",\n  "pyopenssl>>1",\n]')
    out = tmp_path / "report.json"
    done = grade_cli(
        ["--cache-dir", str(grade_cache), "--format", "json", "-o", str(out), "-q", str(repo)], cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    report = _valid_report(out)
    rows = _rows(report)
    assert [r["id"] for r in report["rows"] if r["status"] != "scored"] == []
    rubric = load_rubric()
    assert report["total"]["max"] == sum(rubric.max * row.weight for row in rubric.rows), report["total"]
    replay = rows["offline-replay"]
    assert replay["score"] == 0, replay
    assert "pyproject.toml:13: not a valid requirement" in replay["evidence"], replay
    assert "'pyopenssl>>1'" in replay["evidence"]
    finding = next(f for f in report["findings"] if f["rule"] == "invalid-requirement")
    assert (finding["check"], finding["location"]) == ("replay", "pyproject.toml:13")
    assert rows["make-targets"]["score"] < 3 and rows["loud-miss"]["score"] < 3
    assert report["total"]["percent"] < 60
    assert "environment" not in report  # nothing was installed


@pytest.mark.slow
def test_a_genuinely_unreachable_index_is_not_assessable(
    tmp_path: Path, grade_cli, make_submission: MakeSubmission
) -> None:
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/simple"
    repo = make_submission(
        {"tests/test_ok.py": "def test_ok():\n    assert True\n"}, dependencies=["iniconfig"]
    )
    out = tmp_path / "report.json"
    fresh = tmp_path / "fresh-cache"  # nothing cached: the install must reach the index
    done = grade_cli(
        ["--cache-dir", str(fresh), "--format", "json", "-o", str(out), "-q", str(repo)],
        cwd=tmp_path,
        env={"UV_INDEX_URL": dead, "UV_DEFAULT_INDEX": dead, "PIP_INDEX_URL": dead},
    )
    assert done.returncode == 0, done.stderr
    rows = _rows(_valid_report(out))
    for row_id in ("offline-replay", "make-targets", "loud-miss"):
        row = rows[row_id]
        assert row["status"] == "not-assessable" and row["score"] is None, row
        assert "package index unreachable: the grader's probe for pytest==" in row["evidence"], row
