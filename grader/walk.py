"""The one walk of a submission's checkout: which folders are skipped, links never followed, capped.

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
    max_files: int = MAX_FILES,
    max_bytes: int | None = None,
) -> Iterator[Path]:
    """Regular files below ``root / under`` (see the module's docstring for the rules).

    ``include``: a test on the file's name; only files it accepts are yielded and counted against the caps.
    ``links``: also yield links (to files or folders) where they are, never following them.
    ``depth``: how many folder levels below the start to enter (0: its own files only; None: all, up to
    `MAX_DEPTH`).
    """
    start = Path(root, under)
    count = 0
    size = 0
    for folder, names in _folders(
        start, skip=skip, hidden=hidden, depth=MAX_DEPTH if depth is None else depth
    ):
        for name, info in names:
            if include is not None and not include(name):
                continue
            if stat.S_ISLNK(info.st_mode):
                if not links:
                    continue
            elif not stat.S_ISREG(info.st_mode):
                continue
            count += 1
            size += info.st_size if stat.S_ISREG(info.st_mode) else 0
            if count > max_files or (max_bytes is not None and size > max_bytes):
                return
            yield folder / name


def own_sources(root: Path, *, max_files: int = MAX_FILES, max_bytes: int | None = None) -> Iterator[Path]:
    """The submission's own Python modules: `own_source` files outside `NOT_OWN_CODE` and hidden folders."""
    return files(
        root, skip=NOT_OWN_CODE, hidden=False, include=own_source, max_files=max_files, max_bytes=max_bytes
    )


def folders(
    root: Path, *, depth: int, skip: Collection[str] = SKIPPED, hidden: bool = True
) -> Iterator[Path]:
    """Real folders below ``root`` (not ``root`` itself), at most ``depth`` levels down, in walk order."""
    base = len(Path(root).parts)
    for folder, _names in _folders(Path(root), skip=skip, hidden=hidden, depth=depth):
        if folder != Path(root) and len(folder.parts) - base <= depth:
            yield folder


def _folders(
    start: Path, *, skip: Collection[str], hidden: bool, depth: int
) -> Iterator[tuple[Path, list[tuple[str, os.stat_result]]]]:
    """(folder, its entries that are not folders to enter, with their lstat), folder by folder."""
    base = len(start.parts)
    pending = [start]
    while pending:
        folder = pending.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        below: list[Path] = []
        leaves: list[tuple[str, os.stat_result]] = []
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if entry.name in skip or (not hidden and entry.name.startswith(".")):
                    continue
                if len(folder.parts) - base < depth:
                    below.append(folder / entry.name)
            else:
                leaves.append((entry.name, info))
        yield folder, leaves
        pending.extend(reversed(below))  # depth first, in name order
