"""A full workspace disk is the doing of the run whose files filled it (red-team R11; docs/security.md, Disk).

Real grades on a real small disk: a tmpfs mounted as ``TMPDIR`` (root only). In ``grade batch --jobs 2`` a
filler floods the shared disk from its suite, holds it, and deletes its files; its neighbour must never be
scored 0 for that. A submission that fills the disk itself (and deletes before its run ends), or that only
prints ENOSPC, is graded as it ran. Sizes stay small and holds short: the tmpfs is the machine's memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from grader.rubric import load_rubric
from tests.helpers.sample_marks import default_scores
from tests.test_batch import copy_sample, read_summary

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
# 320 MiB: the runs start with more than the grader's 256 MiB "room" (grader/context.py, _ROOM) free, so a
# full disk is attributed by whose files filled it, not by the old small-disk rule.
_DISK_MIB = 320

# The flood of R11: 16 MiB files in $HOME until ENOSPC, held, then deleted (the run ends clean). Every
# run of the suite floods (the replay suite and the probes that rerun it; the others stay quick).
_NOT_ITS_OWN = "workspace disk filled while this run ran, and not with this run's files"

_FILLER = textwrap.dedent(
    """
    import errno, glob, os, time

    HOLD = {hold}


    def test_corpus():
        chunk = b"x" * (16 * 1024 * 1024)
        made = []
        try:
            for i in range(64):
                path = os.path.join(os.environ["HOME"], f"corpus{{i}}.bin")
                made.append(path)
                with open(path, "wb") as handle:
                    handle.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            full = exc
        else:
            full = None
        time.sleep(HOLD)
        for path in made:
            try:
                os.remove(path)
            except OSError:
                pass
        if {fail} and full is not None:
            raise full
    """
)

# A test of an honest submission that writes a small cache file. It waits (up to 45 s) until the disk
# is nearly full before writing, so that the neighbour's flood reaches it on every machine, however the two
# candidates' pipelines happen to line up; when no flood comes it writes on a roomy disk and passes.
_VICTIM = textwrap.dedent(
    """
    import os, time


    def test_writes_a_cache(tmp_path):
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            st = os.statvfs(tmp_path)
            if st.f_bavail * st.f_frsize < 32 * 1024 * 1024:
                break
            time.sleep(0.2)
        (tmp_path / "cache.bin").write_bytes(b"c" * (48 * 1024 * 1024))
    """
)

_PRINTER = textwrap.dedent(
    """
    def test_cannot_save():
        print("OSError: [Errno 28] No space left on device: 'out.bin'")
        raise AssertionError("No space left on device")
    """
)


def _filler(hold: float, fail: bool) -> Callable[[Path], None]:
    def mutate(repo: Path) -> None:
        (repo / "tests" / "test_zz_corpus.py").write_text(_FILLER.format(hold=hold, fail=fail))

    return mutate


def _victim(repo: Path) -> None:
    (repo / "tests" / "test_zz_cache.py").write_text(_VICTIM)


def _printer(repo: Path) -> None:
    (repo / "tests" / "test_zz_enospc.py").write_text(_PRINTER)


@contextmanager
def _tmpfs(tmp_path: Path, options: str) -> Iterator[Path]:
    """A fresh tmpfs mounted with ``options``, unmounted afterwards even when the test fails."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"{options},mode=1777", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh tmpfs of ``_DISK_MIB`` MiB."""
    with _tmpfs(tmp_path, f"size={_DISK_MIB}m") as where:
        yield where


def _batch(tmp_path: Path, disk: Path, candidates: dict[str, Path], jobs: int) -> Path:
    listing = tmp_path / "candidates.csv"
    listing.write_text(
        "candidate,target\n" + "".join(f"{name},{path}\n" for name, path in candidates.items())
    )
    out = tmp_path / "out"
    args = ["batch", str(listing), "--jobs", str(jobs), "--out", str(out), "--timeout", "150"]
    done = _grade(args, cwd=tmp_path, tmpdir=disk)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def _grade(args: list[str], *, cwd: Path, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "TMPDIR": str(tmpdir),
    }
    env.pop("GRADE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "grader", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


def _report(out: Path, name: str) -> dict:
    return json.loads(next(out.glob(f"{name}*/report.json")).read_text())


def _rows(report: dict) -> dict[str, dict]:
    return {row["id"]: row for row in report["rows"]}


def _fill_notes(report: dict) -> list[str]:
    return [note for note in report["notes"] if "filled the workspace disk" in note]


@pytest.mark.index
def test_a_neighbours_flood_never_scores_the_victim_zero(tmp_path: Path, small_disk: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    out = _batch(
        tmp_path,
        small_disk,
        {
            "mallory": copy_sample(subs / "mallory", mutate=_filler(hold=15, fail=False)),
            "alice": copy_sample(subs / "alice", mutate=_victim),
        },
        jobs=2,
    )
    report = _report(out, "alice")
    alice = _rows(report)
    # The flood reached the victim (its cache write needs room only a flood takes): its first grade had rows
    # the full disk left unassessed, so it was graded again, alone, after the batch ...
    again = [n for n in report["notes"] if n.startswith("graded again, alone, after the rest of the batch")]
    # The first try's reason is kept: a run the neighbour's flood filled under, or the grader's own write in
    # the victim's workspace that the flood made fail.
    assert again and (_NOT_ITS_OWN in again[0] or "no space left on device: workspace" in again[0]), report

    # ... and scores as the sample alone does: never 0 for the flood, and no row left out of the total.
    assert {rid: row["score"] for rid, row in alice.items()} == default_scores(), {
        rid: row["evidence"] for rid, row in alice.items() if row["status"] != "scored"
    }
    # The filler cleaned up, so its suite passed and it is graded as it ran; its report says what it did.
    mallory = _report(out, "mallory")
    assert _rows(mallory)["offline-replay"]["score"] == load_rubric().max
    notes = _fill_notes(mallory)
    assert notes and "MiB in its home" in notes[0], mallory["notes"]
    assert not _fill_notes(_report(out, "alice"))


@pytest.mark.index
def test_two_honest_candidates_on_a_small_disk_grade_normally(tmp_path: Path, small_disk: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    out = _batch(
        tmp_path,
        small_disk,
        {"alice": copy_sample(subs / "alice"), "bob": copy_sample(subs / "bob")},
        jobs=2,
    )
    summary = read_summary(out)
    expected = {rid: str(score) for rid, score in default_scores().items()}
    for name in ("alice", "bob"):
        assert {rid: summary[name][rid] for rid in expected} == expected, summary[name]["reason"]
        assert not _fill_notes(_report(out, name))


@pytest.mark.index
def test_a_submission_cannot_blame_the_disk_for_its_own_failures(tmp_path: Path, small_disk: Path) -> None:
    # One at a time (--jobs 1): no neighbour. The first fills the disk itself, deletes its files before its
    # run ends and fails with the ENOSPC it met; the second only prints ENOSPC and fails.
    subs = tmp_path / "subs"
    subs.mkdir()
    out = _batch(
        tmp_path,
        small_disk,
        {
            "filler": copy_sample(subs / "filler", mutate=_filler(hold=3, fail=True)),
            "printer": copy_sample(subs / "printer", mutate=_printer),
        },
        jobs=1,
    )
    top = load_rubric().max
    for name in ("filler", "printer"):
        replay = _rows(_report(out, name))["offline-replay"]
        assert replay["status"] != "not-assessable", replay
        assert replay["score"] is not None and replay["score"] < top, replay
    filler = _report(out, "filler")
    assert _fill_notes(filler), filler["notes"]
    assert not _fill_notes(_report(out, "printer"))


# Red team 10: fill the disk and leave the flood in place. Every copy the grader made afterwards failed for
# lack of room, and five rows, no-credentials among them, left the total: a committed key went unreported.
_LEAVER = textwrap.dedent(
    """
    import errno, os


    def test_corpus():
        home, i = os.environ["HOME"], 0
        try:
            while True:
                with open(os.path.join(home, f"c{{i}}.bin"), "wb") as handle:
                    handle.write(b"x" * {size})
                i += 1
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
    """
)


@pytest.fixture(params=["bytes", "files"])
def flooded_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A tmpfs that a flood exhausts by bytes (320 MiB) or by files (20,000 inodes, 1 GiB)."""
    options = f"size={_DISK_MIB}m" if request.param == "bytes" else "size=1g,nr_inodes=20000"
    with _tmpfs(tmp_path, options) as where:
        yield where, request.param


@pytest.mark.index
def test_a_flood_left_in_place_does_not_take_rows_out_of_the_total(
    tmp_path: Path, flooded_disk: tuple[Path, str]
) -> None:
    from tests.test_batch import leaked_key

    disk, kind = flooded_disk
    size = 16 * 1024 * 1024 if kind == "bytes" else 0

    def mutate(repo: Path) -> None:
        leaked_key(repo)
        (repo / "tests" / "test_zz_corpus.py").write_text(_LEAVER.format(size=size))

    subs = tmp_path / "subs"
    subs.mkdir()
    out = _batch(tmp_path, disk, {"leaver": copy_sample(subs / "leaver", mutate=mutate)}, jobs=1)
    report = _report(out, "leaver")
    rows = _rows(report)
    secrets = rows["no-credentials"]
    assert secrets["status"] == "scored" and secrets["score"] == 0, secrets
    assert not [r for r in rows.values() if r["status"] == "not-assessable"], report["notes"]
    assert any("left the workspace disk nearly full" in note for note in report["notes"]), report["notes"]


# Red team 30: empty files, written into the working folder (the checkout copy the suite runs in) until the
# disk has no inode left. Bytes stay free; the grader's copies fail for want of files. Every run of the
# suite floods (the replay suite and each probe that reruns it), several at once under --jobs 2.
_INODE_FLOOD = textwrap.dedent(
    """
    import os


    def test_warm_cache():
        folder = os.path.join(os.getcwd(), ".warm")
        os.makedirs(folder, exist_ok=True)
        i = 0
        try:
            while True:
                open(os.path.join(folder, str(i)), "w").close()
                i += 1
        except OSError:
            pass
    """
)


def _inode_flooder(repo: Path) -> None:
    (repo / "tests" / "test_zz_warm.py").write_text(_INODE_FLOOD)


@pytest.fixture
def few_inodes(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with bytes to spare (1 GiB) and 150,000 files."""
    with _tmpfs(tmp_path, "size=1g,nr_inodes=150000") as where:
        yield where


@pytest.mark.index
def test_a_flood_of_empty_files_in_the_working_folder_costs_no_row_its_place(
    tmp_path: Path, few_inodes: Path
) -> None:
    from tests.test_batch import leaked_key

    def mutate(repo: Path) -> None:
        leaked_key(repo)
        _inode_flooder(repo)

    repo = copy_sample(tmp_path / "subs" / "flooder", mutate=mutate)
    out = tmp_path / "report.json"
    args = ["--jobs", "2", "--timeout", "150", "--format", "json", "-o", str(out), "-q", str(repo)]
    done = _grade(args, cwd=tmp_path, tmpdir=few_inodes)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = _rows(report)
    # The committed key is reported, and no row leaves the total for a disk the submission filled itself.
    assert rows["no-credentials"]["status"] == "scored" and rows["no-credentials"]["score"] == 0
    assert not [r for r in rows.values() if r["status"] == "not-assessable"], report["notes"]
    # It is graded as it ran: its flood is its own failure, and the report says what it did.
    assert rows["offline-replay"]["score"] < load_rubric().max
    notes = " ".join(report["notes"])
    assert "files" in notes and "workspace disk" in notes, report["notes"]


@pytest.mark.index
def test_a_neighbours_flood_of_empty_files_leaves_the_victim_graded_as_alone(
    tmp_path: Path, few_inodes: Path
) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    out = _batch(
        tmp_path,
        few_inodes,
        {
            "mallory": copy_sample(subs / "mallory", mutate=_inode_flooder),
            "alice": copy_sample(subs / "alice"),
        },
        jobs=2,
    )
    alice = _rows(_report(out, "alice"))
    assert {rid: row["score"] for rid, row in alice.items()} == default_scores(), {
        rid: row["evidence"] for rid, row in alice.items() if row["status"] != "scored"
    }
    assert _rows(_report(out, "mallory"))["offline-replay"]["score"] < load_rubric().max


# A flood at a pace the 0.25 s sample can follow (about 20,000 files a second): stopped at its floor.
_PACED_FLOOD = textwrap.dedent(
    """
    import os, time


    def test_fill_slowly():
        folder = os.path.join(os.environ["HOME"], "paced")
        os.makedirs(folder, exist_ok=True)
        i = 0
        try:
            while True:
                for _ in range(2000):
                    open(os.path.join(folder, str(i)), "w").close()
                    i += 1
                time.sleep(0.1)
        except OSError:
            pass
    """
)


@pytest.mark.index
def test_a_run_filling_the_disk_with_its_own_files_is_stopped_at_its_floor(
    tmp_path: Path, few_inodes: Path
) -> None:
    def mutate(repo: Path) -> None:
        (repo / "tests" / "test_zz_paced.py").write_text(_PACED_FLOOD)

    repo = copy_sample(tmp_path / "subs" / "paced", mutate=mutate)
    out = tmp_path / "report.json"
    args = ["--jobs", "1", "--timeout", "150", "--format", "json", "-o", str(out), "-q", str(repo)]
    done = _grade(args, cwd=tmp_path, tmpdir=few_inodes)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    stopped = [
        n for n in report["notes"] if n.startswith("this run was stopped: it was filling the workspace")
    ]
    assert stopped and "files in its home" in stopped[0], report["notes"]
    rows = _rows(report)
    assert rows["offline-replay"]["score"] < load_rubric().max  # its own failure, graded as it ran
    assert not [r for r in rows.values() if r["status"] == "not-assessable"], report["notes"]
