"""How the grader counts what a submission's runs hold on the workspace disk (grader/diskwatch.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.diskwatch import Fill, Held, held_by

MiB = 1024**2


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def test_counts_allocated_bytes_and_never_follows_a_link(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(home / "a" / "b" / "big.bin", 3 * MiB)
    outside = _write(tmp_path / "outside" / "huge.bin", 8 * MiB)
    (home / "link").symlink_to(outside)
    (home / "dirlink").symlink_to(outside.parent, target_is_directory=True)
    with open(home / "sparse.bin", "wb") as handle:  # 1 GiB long, nothing allocated: fills no disk
        handle.truncate(1024**3)
    device = os.stat(tmp_path).st_dev
    held = held_by({home: "home"}, (), device)
    assert held.complete
    assert 3 * MiB <= held.bytes < 4 * MiB
    assert held.biggest == "home"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_counts_a_deleted_file_its_sandbox_user_still_holds_open(tmp_path: Path) -> None:
    uid = 64_000 + os.getpid() % 1000
    hidden = _write(tmp_path / "run" / "gone.bin", 2 * MiB)
    os.chown(hidden, uid, uid)
    device = os.stat(tmp_path).st_dev
    with open(hidden, "rb"):
        hidden.unlink()
        seen = held_by({tmp_path / "run": "home"}, {uid}, device)
        other = held_by({tmp_path / "run": "home"}, {uid + 1}, device)
    assert seen.bytes >= 2 * MiB and seen.biggest == "(deleted files still open)"
    assert other.bytes < MiB  # another candidate's uid: not this submission's bytes


def test_a_fill_is_the_runs_own_when_it_holds_half_of_what_was_lost() -> None:
    lost_300 = {"free_before": 300 * MiB, "free_at": 0}
    assert Fill(**lost_300, held=Held(200 * MiB, True)).own
    assert not Fill(**lost_300, held=Held(10 * MiB, True)).own
    # a count that hit its cap is a lower bound: the fill is taken as the run's own
    assert Fill(**lost_300, held=Held(10 * MiB, False)).own


def test_a_flood_of_empty_files_is_counted_by_its_files(tmp_path: Path) -> None:
    # Red team 30: empty files exhaust a disk's inodes while its bytes stay free; what a run holds is then
    # told by how many entries its folders hold, and the biggest folder is the one with the most of them.
    home, work = tmp_path / "home", tmp_path / "work"
    _write(work / "module.py", 8192)
    (home / "flood").mkdir(parents=True)
    for i in range(500):
        (home / "flood" / str(i)).touch()
    held = held_by({work: "working folder", home: "home"}, (), os.stat(tmp_path).st_dev)
    assert held.complete and held.files == 502  # the flood folder and its 500 files, the module
    assert held.biggest == "home"
    files_lost = {"free_before": 1000, "free_at": 0, "files": True}
    assert Fill(**files_lost, held=held).own  # 502 of 1000 files lost: its own
    assert not Fill(**files_lost, held=Held(held.bytes, True, "home", 20)).own
    assert Fill(**files_lost, held=held).amount(1000) == "1,000 files"


def test_what_a_run_added_to_its_copy_is_told_from_what_it_changed(tmp_path: Path) -> None:
    # The reclaim after a flood removes only what the pristine tree does not hold: a flood folder, a file
    # dropped beside the tests, a test file turned into a folder of files; an edited file stays (red team 30).
    from grader.context import _added

    pristine, copy = tmp_path / "pristine", tmp_path / "copy"
    for base in (pristine, copy):
        _write(base / "tests" / "test_a.py", 10)
        _write(base / "README.md", 10)
    (copy / "tests" / "test_a.py").unlink()
    _write(copy / "tests" / "test_a.py" / "0", 0)
    _write(copy / ".warm" / "1", 0)
    _write(copy / "tests" / "extra.txt", 0)
    _write(copy / "README.md", 20)
    (copy / "link").symlink_to(tmp_path, target_is_directory=True)
    added = sorted(p.relative_to(copy).as_posix() for p in _added(copy, pristine))
    assert added == [".warm", "link", "tests/extra.txt", "tests/test_a.py"]
