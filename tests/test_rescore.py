"""`grade rescore`: a stored batch scored again under an edited rubric, from stored facts only.

The proof that no submission code runs is twofold: the submissions are deleted and the re-score runs in a
fresh network namespace under an audit hook that kills the process at the first attempt to start any
process; and in-process, the sandbox's run function and subprocess.Popen are patched to raise.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.cli import main
from grader.rubric import load_rubric
from tests.helpers.bake import unshare_works
from tests.helpers.sample_marks import REHEARSAL
from tests.test_batch import copy_sample, failing_test, run_grade

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (ROOT / "rubric" / "default.yaml").read_text()

_NO_SPAWN = textwrap.dedent(
    """
    import os, sys

    BANNED = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty",
              "os.spawn", "pty.spawn"}

    def hook(event, args):
        if event in BANNED:
            os.write(2, f"SPAWNED {event}\\n".encode())
            os._exit(97)

    sys.addaudithook(hook)
    from grader.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def loosened(text: str = DEFAULT) -> str:
    """The rubric with offline-replay's weight 3 -> 1 and level 3 asking only for passing tests offline."""
    start = text.index("  - id: offline-replay")
    following = text.find("  - id: ", start + 1)
    end = following if following != -1 else len(text)
    row = text[start:end].replace("    weight: 3\n", "    weight: 1\n", 1)
    row = re.sub(r"(?m)^      3: .*$", "      3: passed > 0 and network_attempts == 0", row, count=1)
    assert "weight: 1" in row and "3: passed > 0 and network_attempts == 0\n" in row
    return text[:start] + row + text[end:]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stored batch: alice (full marks), dave (one failing test), mallory (unreachable); sources deleted."""
    work = tmp_path_factory.mktemp("rescore")
    subs = work / "subs"
    subs.mkdir()
    listing = work / "list.csv"
    listing.write_text(
        "candidate,target\n"
        f"alice,{copy_sample(subs / 'alice')}\n"
        f"dave,{copy_sample(subs / 'dave', mutate=failing_test)}\n"
        "mallory,file:///nonexistent/repo.git\n"
    )
    out = work / "out"
    result = run_grade(
        ["batch", str(listing), "--jobs", "2", "--output", str(out), "--timeout", "120"], cwd=work
    )
    assert result.returncode == 0, result.stderr
    shutil.rmtree(subs)  # nothing left to run, even by mistake
    return out


@pytest.fixture
def batch_copy(stored: Path, tmp_path: Path) -> Path:
    """A private copy of the stored batch, so a test that re-scores in place does not disturb the others."""
    return Path(shutil.copytree(stored, tmp_path / "batch"))


def summary(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "summary.csv", newline="", encoding="utf-8") as handle:
        return {row["candidate"]: row for row in csv.DictReader(handle)}


def lines_of(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


def rescore_offline(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", _NO_SPAWN, "rescore", *args]
    if unshare_works():
        argv = ["unshare", "-n", *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.index
def test_rescore_prints_who_moved_and_starts_no_process(batch_copy: Path, tmp_path: Path) -> None:
    before = summary(batch_copy)
    old_reports = {n: (batch_copy / n / "report.json").read_bytes() for n in ("alice", "dave")}
    rubric = tmp_path / "new.yaml"
    rubric.write_text(loosened())

    result = rescore_offline([str(batch_copy), "--rubric", str(rubric)], cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert "SPAWNED" not in result.stderr
    out = lines_of(result.stdout)
    assert "alice offline-replay weight 3 -> 1 (score 3)" in out
    assert f"dave offline-replay {before['dave']['offline-replay']} -> 3" in out
    assert before["dave"]["offline-replay"] != "3"
    points, maximum = int(before["alice"]["points"]), int(before["alice"]["max"])
    old, new = round(100 * points / maximum, 1), round(100 * (points - 6) / (maximum - 6), 1)
    assert f"alice total {points}/{maximum} ({old}%) -> {points - 6}/{maximum - 6} ({new}%)" in out
    assert any(line.startswith("mallory not assessable:") for line in out)

    after = summary(batch_copy)
    assert after["dave"]["offline-replay"] == "3"
    assert after["alice"]["max"] == str(int(before["alice"]["max"]) - 6)  # 3 points x (3 - 1) weight
    assert after["mallory"]["status"] == "not assessable"
    # Nothing lost: the replaced reports wait in history/, byte for byte.
    for name, data in old_reports.items():
        (kept,) = (batch_copy / name / "history").iterdir()
        assert (kept / "report.json").read_bytes() == data
        new = json.loads((batch_copy / name / "report.json").read_text())
        assert new["rubric"]["sha256"] != json.loads(data)["rubric"]["sha256"]
        assert "no submission code ran" in new["notes"][-1]
    (batch_history,) = (batch_copy / "history").iterdir()
    assert summary(batch_history) == before


@pytest.mark.index
def test_rescore_with_the_rubric_it_was_graded_with_writes_nothing(batch_copy: Path, tmp_path: Path) -> None:
    before = {p.relative_to(batch_copy): p.read_bytes() for p in sorted(batch_copy.rglob("*")) if p.is_file()}
    default = ROOT / "rubric" / "default.yaml"

    result = rescore_offline([str(batch_copy), "--rubric", str(default)], cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    out = lines_of(result.stdout)
    assert "alice no change" in out and "dave no change" in out
    sha = load_rubric(default).sha256[:12]
    assert out[-1] == (
        f"nothing changed: every run in {batch_copy} is already scored with 'Cassette take-home (default)' "
        f"({sha}); nothing written"
    )
    after = {p.relative_to(batch_copy): p.read_bytes() for p in sorted(batch_copy.rglob("*")) if p.is_file()}
    assert after == before  # no history/ snapshot, no rewritten report or summary


@pytest.mark.index
def test_rescore_with_the_rehearsal_rubric_lifts_only_the_standin_cap(
    batch_copy: Path, tmp_path: Path
) -> None:
    """rubric/rehearsal.yaml extends default.yaml: the stored copy is the resolved rubric, which loads on its
    own (no default.yaml beside it) and is exactly what the report's sha256 names."""
    result = rescore_offline([str(batch_copy), "--rubric", str(REHEARSAL)], cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    out = lines_of(result.stdout)
    assert "alice model-metadata 2 -> 3" in out
    assert not [line for line in out if line.startswith("alice ") and "model-metadata" not in line
                and not line.startswith("alice total")]  # fmt: skip
    report = json.loads((batch_copy / "alice" / "report.json").read_text())
    assert report["total"]["points"] == report["total"]["max"]
    stored = json.loads((batch_copy / "alice" / "run.json").read_text())
    copy = batch_copy / "alice" / stored["files"]["rubric"]
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == report["rubric"]["sha256"]
    alone = tmp_path / "alone" / "rubric.yaml"
    alone.parent.mkdir()
    shutil.copy(copy, alone)
    assert load_rubric(alone).sha256 == report["rubric"]["sha256"]


@pytest.mark.index
def test_rescore_never_reaches_the_sandbox(
    stored: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import grader.sandbox

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("re-scoring started a process")

    monkeypatch.setattr(grader.sandbox, "run", forbidden)
    monkeypatch.setattr(subprocess, "Popen", forbidden)
    rubric = tmp_path / "new.yaml"
    rubric.write_text(loosened())
    listing_before = sorted(str(p.relative_to(stored)) for p in stored.rglob("*"))

    assert main(["rescore", str(stored), "--rubric", str(rubric), "--dry-run"]) == 0

    out = lines_of(capsys.readouterr().out)
    assert any(line.startswith("dave offline-replay") and line.endswith("-> 3") for line in out)
    assert out[-1].startswith("would re-score 3 run(s)")
    assert sorted(str(p.relative_to(stored)) for p in stored.rglob("*")) == listing_before  # dry run


@pytest.mark.index
def test_fact_not_stored_is_refused_with_file_and_line(batch_copy: Path, tmp_path: Path) -> None:
    text = DEFAULT.replace("3: findings == 0", "3: findings == 0 and rotated_keys == 0", 1)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "rotated_keys" in row)
    rubric = tmp_path / "new.yaml"
    rubric.write_text(text)
    report = (batch_copy / "alice" / "report.json").read_bytes()

    result = rescore_offline([str(batch_copy), "--rubric", str(rubric)], cwd=tmp_path)

    assert result.returncode == 2
    assert result.stderr.startswith(f"grade: error: {rubric}:{line}: ")
    assert "'rotated_keys' is not a fact" in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""
    assert (batch_copy / "alice" / "report.json").read_bytes() == report
    assert not (batch_copy / "history").exists()


@pytest.mark.index
def test_single_stored_run_and_a_check_it_never_ran(tmp_path: Path) -> None:
    replay_only = tmp_path / "replay-only.yaml"
    start, end = DEFAULT.index("  - id: offline-replay"), DEFAULT.index("  - id: no-credentials")
    replay_only.write_text(DEFAULT[: DEFAULT.index("rows:")] + "rows:\n" + DEFAULT[start:end])
    run = tmp_path / "run"
    graded = run_grade(
        [
            "--rubric",
            str(replay_only),
            "--store",
            str(run),
            "--quiet",
            "--timeout",
            "120",
            str(ROOT / "sample_solution"),
        ],
        cwd=tmp_path,
    )
    assert graded.returncode == 0, graded.stderr
    assert graded.stderr == ""  # --quiet
    assert json.loads((run / "run.json").read_text())["checks"].keys() == {"replay"}

    # The default rubric needs checks this run never ran: refused, pointing at the first such row.
    line = DEFAULT.splitlines().index("    check: secrets") + 1
    refused = rescore_offline([str(run), "--rubric", str(ROOT / "rubric" / "default.yaml")], cwd=tmp_path)
    assert refused.returncode == 2
    assert (
        f"default.yaml:{line}: row 'no-credentials': check 'secrets' is not in the stored runs"
        in refused.stderr
    )
    assert "unknown check" not in refused.stderr  # `secrets` is a real check: the runs did not store it
    assert "stored in" in refused.stderr

    # A rubric over what it did store works on the single run folder; the same rubric again changes
    # nothing, says so and writes nothing (no second history snapshot, the files as they were).
    new = tmp_path / "new.yaml"
    new.write_text(loosened(replay_only.read_text()))
    outputs = []
    for _ in range(2):
        before = {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
        done = rescore_offline([str(run), "--rubric", str(new)], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        outputs.append(lines_of(done.stdout))
    assert "run offline-replay weight 3 -> 1 (score 3)" in outputs[0]
    (kept,) = (run / "history").iterdir()
    assert (
        outputs[0][-1]
        == f"wrote 1 run(s); the files replaced are kept in history/{kept.name}/ inside each folder written"
    )
    assert outputs[1][0] == "run no change"
    sha = load_rubric(new).sha256[:12]
    assert outputs[1][-1] == (
        f"nothing changed: every run in {run} is already scored with 'Cassette take-home (default)' "
        f"({sha}); nothing written"
    )
    after = {p.relative_to(run): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    assert after == before
    manifest = json.loads((run / "run.json").read_text())
    assert len(manifest["rescored"]) == 1


def test_not_a_run_folder(tmp_path: Path) -> None:
    rubric = tmp_path / "new.yaml"
    rubric.write_text(DEFAULT)
    result = rescore_offline([str(tmp_path), "--rubric", str(rubric)], cwd=tmp_path)
    assert result.returncode == 2
    assert "neither a batch folder" in result.stderr and result.stderr.count("\n") == 1
