"""The grader's one walker: every folder tree it reads is walked here, without recursion, links never entered.

Two shapes over one iteration (``_scan``): `files` and `folders` for a submission's checkout, the rules below
applied the same way for every check; `tree`, shaped like ``os.walk(top, followlinks=False)`` (folder names to
prune in place, file names), for trees the grader itself manages (the snapshot's ``.git`` removal, a venv's
digest and sealing, the kept workspace, the chown back after a run).

Every check that looks for files in a checkout (sources, tapes, config, REPLAY.md's neighbours) walks it
through `files` or `folders`, so the rules are the same everywhere:

- **Links**: never entered, never yielded as files (``links=True`` yields them, for a caller that reports a
  link where it expected a file, like the tape reader). Only regular files (by ``lstat``) are yielded.
- **Skipped folders**: by name, at any depth. `SKIPPED` (version control data, installed third-party code,
  caches) is the default, and every check uses it or a set built from it: the canary scan looks at
  everything a run wrote but `.git`, checks about the submission's own modules use `NOT_OWN_CODE`, and
  ``hidden=False`` skips every folder whose name starts with a dot.
- **Caps**: at most ``max_files`` files and ``max_bytes`` bytes (the sizes of the files yielded), then the
  walk stops; a file is still read through `grader/safeio.py` with its own size cap.
- **Order**: sorted, a folder's files before its sub-folders, so findings come out in the same order on
  every machine.
- **Depth**: never more than `grader.deeptree.MAX_DEPTH` levels down, and without recursion (a checkout
  nested deeper than Python's recursion limit cannot crash a check).

`tree` lists links (to folders too) with the file names and never enters them, skips nothing unless the
caller prunes, and goes ``max_depth`` levels down (`MAX_DEPTH`; None: all the way, for a clean-up that must
reach everything a run made).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from grader.deeptree import MAX_DEPTH

__all__ = [
    "MAX_FILES",
    "NOT_OWN_CODE",
    "SKIPPED",
    "THIRD_PARTY",
    "VCS",
    "files",
    "folders",
    "own_source",
    "own_sources",
    "tree",
]

# Version-control data: history is read through git (grader/gitsafe.py), never by walking it.
VCS = frozenset({".git", ".hg", ".svn"})
# Installed third-party code, tool environments and caches: not the candidate's work.
THIRD_PARTY = frozenset(
    {
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        "__pycache__",
        "site-packages",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)
SKIPPED = VCS | THIRD_PARTY
# Besides SKIPPED, for checks about the submission's own modules: its tests, docs, build output, and a
# folder named `env` (most often a virtualenv; `env` is not skipped by default, since tapes or tests may
# sit in one).
NOT_OWN_CODE = SKIPPED | {"env", "tests", "test", "docs", "build", "dist"}
MAX_FILES = 100_000


def own_source(name: str) -> bool:
    """A Python module that is not a test module (``test_*.py``, ``*_test.py``, ``conftest.py``)."""
    return name.endswith(".py") and not (
        name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
    )


def files(
    root: Path,
    *,
    under: Path | str = "",
    skip: Collection[str] = SKIPPED,
    hidden: bool = True,
    include: Callable[[str], bool] | None = None,
    links: bool = False,
    depth: int | None = None,
    max_files: int | None = MAX_FILES,
    max_bytes: int | None = None,
) -> Iterator[Path]:
    """Regular files below ``root / under`` (see the module's docstring for the rules).

    ``include``: a test on the file's name; only files it accepts are yielded and counted against the caps.
    ``links``: also yield links (to files or folders) where they are, never following them.
    ``depth``: how many folder levels below the start to enter (0: its own files only; None: all, up to
    `MAX_DEPTH`). ``max_files`` None: no cap on the count (a scan that must not miss a file).
    """
    count = 0
    size = 0
    for folder, _level, below, others in _scan(str(Path(root, under)), MAX_DEPTH if depth is None else depth):
        _prune(below, skip, hidden)
        for entry in others:
            name = entry.name
            if include is not None and not include(name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                if not links:
                    continue
            elif not stat.S_ISREG(info.st_mode):
                continue
            count += 1
            size += info.st_size if stat.S_ISREG(info.st_mode) else 0
            if (max_files is not None and count > max_files) or (max_bytes is not None and size > max_bytes):
                return
            yield Path(folder, name)


def own_sources(root: Path, *, max_files: int = MAX_FILES, max_bytes: int | None = None) -> Iterator[Path]:
    """The submission's own Python modules: `own_source` files outside `NOT_OWN_CODE` and hidden folders."""
    return files(
        root, skip=NOT_OWN_CODE, hidden=False, include=own_source, max_files=max_files, max_bytes=max_bytes
    )


def folders(
    root: Path, *, depth: int, skip: Collection[str] = SKIPPED, hidden: bool = True
) -> Iterator[Path]:
    """Real folders below ``root`` (not ``root`` itself), at most ``depth`` levels down, in walk order."""
    for folder, level, below, _others in _scan(str(root), depth):
        _prune(below, skip, hidden)
        if level > 0:
            yield Path(folder)


def tree(top: str | Path, max_depth: int | None = MAX_DEPTH) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top, followlinks=False)``, top-down: (folder, its sub-folder names, its other names), the
    folder names editable to prune or redirect the walk; links (to folders too) are among the other names.
    Never more than ``max_depth`` levels below ``top`` (None: no limit), and without recursion."""
    last = None if max_depth is None else max_depth - 1
    for folder, _level, below, others in _scan(str(top), last):
        yield folder, below, [entry.name for entry in others]


def _prune(names: list[str], skip: Collection[str], hidden: bool) -> None:
    names[:] = [n for n in names if n not in skip and (hidden or not n.startswith("."))]


def _scan(top: str, last: int | None) -> Iterator[tuple[str, int, list[str], list[os.DirEntry[str]]]]:
    """(folder, its level below ``top``, names of its real sub-folders, its other entries), folder by folder,
    depth first in name order, never below level ``last`` (None: no limit).

    The caller may edit the list of sub-folder names before asking for the next folder: only the names left
    are entered. An unreadable folder is passed over. No recursion: a tree nested deeper than Python's
    recursion limit is walked like any other.
    """
    if os.path.islink(top):  # a link is never entered, the top one included (a run's `.git` -> `/`)
        return
    pending: list[tuple[str, int]] = [(top, 0)]
    while pending:
        folder, level = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        below: list[str] = []
        others: list[os.DirEntry[str]] = []
        for entry in entries:
            try:
                real_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                real_folder = False
            if real_folder:
                below.append(entry.name)
            else:
                others.append(entry)
        yield folder, level, below, others
        if last is None or level < last:
            pending.extend((os.path.join(folder, name), level + 1) for name in reversed(below))
