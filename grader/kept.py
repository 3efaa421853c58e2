"""A workspace kept for the reviewer (`grade --keep-workspace`) is safe to enter with git.

The suite owned its checkout, `.git` included, and could write its own folders and logs: a
`core.fsmonitor`, `core.pager`, filter or `core.worktree` setting planted there would run as the reviewer
the first time they type `git status` or `git log` in a kept folder. Before the workspace is handed over,
every git folder something sandboxed could have written is made inert: each `.git` (folder, file or link)
is renamed to `.git.inert`, and a folder git would take for a repository of its own (a bare one: `HEAD`
beside `objects` or `commondir`) gets its `HEAD` renamed to `HEAD.inert`. The suite's
checkout (`repo/`) then gets a copy of the submitted `.git` from the pristine copy, whose configuration the
grader wrote: there `git status` and `git diff` show what the suite changed, and run nothing of its own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from grader.walk import tree

__all__ = ["INERT", "make_inert"]

INERT = ".inert"
_DEPTH = 4096
_GIT_DIR_SIGNS = ("objects", "commondir")  # git takes a folder for a repository only with one of them


def make_inert(root: Path, pristine: Path | None) -> list[str]:
    """Neutralise every git folder under ``root`` outside ``pristine``; the paths renamed (relative).

    Idempotent: a second call finds nothing left to rename and does not copy `.git` again.
    """
    renamed: list[str] = []
    skip = Path(pristine).resolve() if pristine is not None else None
    # Iterative (a run can leave folders nested deeper than Python's recursion limit), and deep enough for
    # any folder a reviewer could still enter.
    for dirpath, dirnames, filenames in tree(root, max_depth=_DEPTH):
        here = Path(dirpath)
        if skip is not None and here.resolve() == skip:
            dirnames[:] = []
            continue
        names = set(dirnames) | set(filenames)
        if ".git" in names:
            new = _rename(here / ".git", ".git" + INERT)
            renamed.append(str((here / ".git").relative_to(root)))
            if ".git" in dirnames:
                dirnames[dirnames.index(".git")] = new.name
        if "HEAD" in names and any(sign in names for sign in _GIT_DIR_SIGNS):
            _rename(here / "HEAD", "HEAD" + INERT)
            if not here.name.startswith(".git" + INERT):  # implied by the .git rename listed already
                renamed.append(str((here / "HEAD").relative_to(root)))
    checkout = Path(root) / "repo"
    if skip is not None and (skip / ".git").is_dir() and checkout.is_dir() and not checkout.is_symlink():
        if not os.path.lexists(checkout / ".git"):
            shutil.copytree(skip / ".git", checkout / ".git", symlinks=True)
    return renamed


def _rename(path: Path, name: str) -> Path:
    """Rename ``path`` to ``name`` beside it (``name.2``, ``name.3`` … when taken); the new path."""
    new = path.with_name(name)
    n = 1
    while os.path.lexists(new):
        n += 1
        new = path.with_name(f"{name}.{n}")
    os.rename(path, new)
    return new
