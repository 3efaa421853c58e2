"""A checkout with folders nested 1,400 deep (committed, or made by the suite while it runs) is graded, not
an internal error: Python 3.11's os.walk/shutil.rmtree recurse once per level (a red-team pass crashed the
grader this way, every row not-assessable)."""

from __future__ import annotations

import os
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.deeptree import MAX_DEPTH, prune_deep, remove_tree, remove_workspace
from tests.adversarial.builders import commit, sample_copy

LEVELS = 1400


def _deep(base: Path, levels: int = LEVELS) -> None:
    """base/d/d/…/d/x.txt without recursion and without a path longer than the kernel takes at once."""
    base.mkdir(parents=True, exist_ok=True)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("x.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


@pytest.fixture
def outside_pytest_tmp() -> Iterator[Path]:
    """A folder outside pytest's own temporary root: pytest removes its old folders recursively, so a deep
    tree left there by an interrupted run would crash every later pytest session on this machine."""
    folder = Path(tempfile.mkdtemp(prefix="deep-tree-"))
    try:
        yield folder
    finally:
        remove_tree(folder)


def test_prune_and_remove_without_recursion(outside_pytest_tmp: Path) -> None:
    tmp_path = outside_pytest_tmp
    repo = tmp_path / "repo"
    _deep(repo / "deep")
    _deep(repo / "shallow", levels=3)
    (repo / ".git").mkdir()
    assert prune_deep(repo) == ["deep/" + "/".join(["d"] * (MAX_DEPTH - 1))]
    assert (repo / "shallow" / "d" / "d" / "d" / "x.txt").is_file()
    _deep(tmp_path / "again")
    remove_tree(tmp_path / "again")
    assert not (tmp_path / "again").exists()


def test_a_workspace_is_removed_whole_and_nothing_a_link_names(outside_pytest_tmp: Path) -> None:
    """The end of every grade: its runs' copies removed side by side, a folder too deep for rmtree among them,
    and a link a run left (to a folder of the host) removed as a link, its target untouched."""
    host = outside_pytest_tmp / "host"
    (host / "keep").mkdir(parents=True)
    (host / "keep" / "file.txt").write_text("mine", encoding="utf-8")
    workspace = outside_pytest_tmp / "workspace"
    for run in ("a", "b", "c"):
        (workspace / "scratch" / run / "repo").mkdir(parents=True)
        (workspace / "scratch" / run / "repo" / "tape.json").write_text("{}", encoding="utf-8")
    _deep(workspace / "home" / "deep")
    (workspace / "home" / "up").symlink_to(host)
    (workspace / "logs").symlink_to(host / "keep")
    remove_workspace(workspace)
    assert not workspace.exists()
    assert (host / "keep" / "file.txt").read_text(encoding="utf-8") == "mine"


@pytest.mark.slow
@pytest.mark.index
def test_a_deep_tree_committed_or_made_by_the_suite_is_graded(
    outside_pytest_tmp: Path, grade_cache: Path
) -> None:
    tmp_path = outside_pytest_tmp
    from grader.grading import grade
    from grader.rubric import load_rubric

    repo = sample_copy(tmp_path / "deep")
    _deep(repo / "data" / "nest")
    (repo / "tests" / "test_leaves_a_deep_tree.py").write_text(
        textwrap.dedent(
            f"""
            import os

            def test_makes_a_deep_tree_in_the_checkout():
                fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
                for _ in range({LEVELS}):
                    os.mkdir("d", dir_fd=fd)
                    inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                    os.close(fd)
                    fd = inner
                os.close(fd)
            """
        )
    )
    report = grade(str(commit(repo)), rubric=load_rubric(), timeout=120, cache_root=grade_cache)

    statuses = {row["id"]: row["status"] for row in report["rows"]}
    assert all(status == "scored" for status in statuses.values()), statuses
    assert any("nested deeper than" in note and "data/nest/d/d" in note for note in report["notes"]), report[
        "notes"
    ]
    offline = next(row for row in report["rows"] if row["id"] == "offline-replay")
    assert offline["score"] == 3, offline
