"""Folders nested deeper than any project needs: found without recursion, removed without recursion.

Python 3.11's ``os.walk``, ``shutil.copytree`` and ``shutil.rmtree`` recurse once per folder level, so a
submission that commits ``d/d/d/…/x.txt`` 1,400 levels deep (git and the kernel accept it) crashed the grader
with RecursionError before anything was graded. The checkout is pruned right after it is acquired, before any
walk; the grader's clean-up removes what a run left behind the same way. Walking a tree is grader/walk.py's
job (its walks stop at `MAX_DEPTH` too); this module removes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["MAX_DEPTH", "prune_deep", "remove_tree"]

# Folder levels below the checkout's root; real projects stay far below (node_modules-style trees ~20).
MAX_DEPTH = 64


def prune_deep(repo: Path, max_depth: int = MAX_DEPTH) -> list[str]:
    """Remove every folder more than ``max_depth`` levels below ``repo`` (``.git`` aside); return the
    repo-relative paths of the folders removed (each the top of a removed subtree)."""
    removed: list[str] = []
    stack: list[tuple[Path, int]] = [(repo, 0)]
    while stack:  # iterative on purpose: see the module docstring
        here, depth = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:  # e.g. a path past PATH_MAX: nothing below it is kept
            removed.append(str(here.relative_to(repo)))
            remove_tree(here)
            continue
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False) or (here == repo and entry.name == ".git"):
                continue
            path = Path(entry.path)
            if depth + 1 >= max_depth:
                removed.append(str(path.relative_to(repo)))
                remove_tree(path)
            else:
                stack.append((path, depth + 1))
    return sorted(removed)


def remove_tree(path: Path) -> None:
    """``shutil.rmtree``, and ``rm -rf`` (which walks without recursion) when that cannot finish."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except (RecursionError, OSError):
        pass
    # Never follows a link (rm does not), never leaves the file system the tree is on.
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False, capture_output=True)
