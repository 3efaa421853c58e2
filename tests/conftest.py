"""Shared kit-test fixtures: a session-wide environment cache and small generated submissions."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from tests.helpers.git import GIT_ENV as _GIT_ENV
from tests.helpers.processes import SESSION_VARIABLE, leftovers

REPO_ROOT = Path(__file__).resolve().parents[1]

MakeSubmission = Callable[..., Path]


def pytest_sessionstart(session: pytest.Session) -> None:
    # Inherited by every process the suite starts: the session-end check finds any that outlived it.
    os.environ[SESSION_VARIABLE] = f"{os.getpid()}-{secrets.token_hex(8)}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when a process it started still runs (a fixture must end what it starts)."""
    left = leftovers(os.environ.get(SESSION_VARIABLE, ""))
    if not left:
        return
    lines = [f"  pid {pid}: {command}" for pid, command in left]
    message = "\n".join(["the test session left processes running (ended now):", *lines])
    writer = session.config.get_terminal_writer()
    writer.line()
    writer.line(message, red=True)
    for pid, _command in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def grade_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One environment cache for the whole session, so submissions with the same dependencies install once."""
    return tmp_path_factory.mktemp("grade-cache")


@pytest.fixture
def make_submission(tmp_path: Path) -> MakeSubmission:
    """Write a small submission (pyproject + files, dedented) and commit it to a fresh git repo."""

    def make(
        files: Mapping[str, str],
        *,
        name: str = "submission",
        dependencies: Sequence[str] = (),
        pyproject: str | None = None,
    ) -> Path:
        repo = tmp_path / name
        repo.mkdir()
        if pyproject is None:
            deps = ", ".join(f'"{d}"' for d in dependencies)
            pyproject = f'[project]\nname = "{name}"\nversion = "0.1.0"\ndependencies = [{deps}]\n'
        (repo / "pyproject.toml").write_text(pyproject, encoding="utf-8")
        for rel, text in files.items():
            path = repo / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        env = {**os.environ, **_GIT_ENV, "HOME": str(tmp_path)}
        for argv in (
            ["git", "init", "-q", "-b", "main"],
            ["git", "add", "-A"],
            ["git", "commit", "-qm", "work"],
        ):
            subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True)
        return repo

    return make


@pytest.fixture
def grade_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real `grade` command (python -m grader) as a subprocess: (args, cwd, env=None)."""

    def run(
        args: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        full_env = {**os.environ, "PYTHONPATH": pythonpath, **(env or {})}
        full_env.pop("GRADE_DEBUG", None)
        return subprocess.run(
            [sys.executable, "-m", "grader", *args],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run
