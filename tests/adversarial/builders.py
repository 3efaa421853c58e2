"""Builders of adversarial submissions (see the package docstring). Real git repositories, no mocks.

The submissions themselves are defined once, by the shipped calibration corpus's ``tamper`` mutation
(grader/selftest/mutations.py); this module adds the bands and evidence the tests assert.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.selftest.mutations import TAMPER_KINDS, mutations
from tests.helpers.git import GIT_ENV as _GIT_ENV

SAMPLE = Path(__file__).resolve().parents[2] / "sample_solution"
_IGNORE = shutil.ignore_patterns(".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache", "*.pyc")


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Path], Path]
    bands: dict[str, tuple[int, int]]  # row id -> (lowest, highest) score allowed
    note: str = ""
    refused: bool = False  # True: `grade` must refuse it (exit 2)
    evidence: tuple[str, ...] = field(default_factory=tuple)  # substrings the offline-replay evidence names


def commit(repo: Path, message: str = "work") -> Path:
    """`git init` (if needed), add everything, commit; returns ``repo``."""
    env = {**os.environ, **_GIT_ENV, "HOME": str(repo.parent)}
    if not (repo / ".git").exists():
        subprocess.run(
            ["git", "init", "-q", "-b", "main"], cwd=repo, env=env, check=True, capture_output=True
        )
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True, capture_output=True)
    subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-m", message],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    return repo


def sample_copy(dest: Path) -> Path:
    """A copy of sample_solution at ``dest`` (not committed yet)."""
    shutil.copytree(SAMPLE, dest, ignore=_IGNORE, symlinks=True)
    return dest


def tampered(kind: str) -> Callable[[Path], Path]:
    """A builder: sample_solution, committed, then the calibration corpus's ``tamper`` mutation of ``kind``
    (grader/selftest/mutations.py, the one definition of these submissions), committed on top."""
    if kind not in TAMPER_KINDS:
        raise ValueError(f"unknown tamper kind {kind!r}")

    def build(dest: Path) -> Path:
        repo = commit(sample_copy(dest), "take-home submission")
        mutations()["tamper"](repo, {}, kind=kind)
        return commit(repo, "final touches")

    build.__doc__ = f"sample_solution with the tamper mutation {kind!r}"
    return build


# A run the grader does not believe is not "make test passed" either (red-team F11: a detected forgery kept
# make-targets at 3 and out-scored the honest failing suite).
_CAPPED = {"offline-replay": (0, 1), "make-targets": (0, 1)}

CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case(
            "forged-conftest",
            tampered("forged-conftest"),
            _CAPPED,
            "makereport wrapper rewrites failures",
            evidence=("conftest.py",),
        ),
        Case(
            "skipped-failures",
            tampered("skipped-failures"),
            _CAPPED,
            "failing tests marked skip",
            evidence=("skip",),
        ),
        Case(
            "xfail-at-run-time",
            tampered("xfail-at-run-time"),
            _CAPPED,
            "a fixture applies xfail marks while the tests run (red team 5, G2)",
            evidence=("xfail",),
        ),
        Case(
            "skip-hook",
            tampered("skip-hook"),
            _CAPPED,
            "modifyitems adds skip marks",
            evidence=("conftest.py",),
        ),
        Case("os-exit", tampered("os-exit"), _CAPPED, "os._exit(0) in a test", evidence=("never finished",)),
        Case("sys-exit", tampered("sys-exit"), _CAPPED, "sys.exit(0) in a test"),
        Case(
            "killed-interpreter",
            tampered("killed-interpreter"),
            _CAPPED,
            "SIGKILL to itself",
            evidence=("never finished",),
        ),
        Case(
            "forged-result-log",
            tampered("forged-result-log"),
            _CAPPED,
            "writes fake lines into the grader's logs",
        ),
        Case(
            "plugins-disabled", tampered("plugins-disabled"), _CAPPED, "make test drops the grader's plugins"
        ),
    )
}


def build(name: str, dest: Path) -> Path:
    """Build the case ``name`` at ``dest``; returns the repository (or archive) path to grade."""
    return CASES[name].build(dest)
