"""The typed test double for a check's `Context`: a real Context over a folder, with no sandbox.

`folder_context` is the Context `grade` would build for a folder when nothing was installed. `FakeContext`
is that Context with the runs a test gives it instead of sandboxed ones: `replay` (the replay suite's
`ReplayRun`, or the NotAssessable/exception its run raises) and `runner` (what `Context.run` returns for an
argv). Tests use these, never a `SimpleNamespace`, so a check can rely on every attribute a Context has.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from grader.acquire import Workspace
from grader.audit import AuditLog
from grader.context import Context, ReplayRun
from grader.install import Env
from grader.manifest import read_manifest
from grader.sandbox import RunResult

__all__ = ["FakeContext", "folder_context", "replay_run", "run_result"]

Runner = Callable[[Sequence[str]], RunResult]


def folder_context(
    repo: Path,
    *,
    root: Path | None = None,
    thresholds: Mapping[str, float] | None = None,
    install_error: str = "not installed: a test context over a folder",
    **manifest: object,
) -> Context:
    """The `Context` `grade` would build for ``repo`` (its manifest read, ``manifest`` overriding fields),
    with no environment: a check that needs a run gets NotAssessable(``install_error``) from
    `Context.require_env`. ``root`` (default: a folder beside ``repo``) holds the logs."""
    workspace = _workspace(repo, root)
    found = dataclasses.replace(read_manifest(repo), **manifest)  # type: ignore[arg-type]
    return Context(workspace, found, env=None, install_error=install_error, thresholds=thresholds)


class FakeContext(Context):
    """A Context over ``repo`` whose replay suite and runs are the test's (nothing runs in a sandbox).

    ``replay``: what `replay_run` returns, or the exception it raises (None: NotAssessable, as when nothing
    was installed). ``runner``: called with the argv for every `run`, returns its RunResult (an empty audit
    log goes with it). ``installed``: whether the submission's environment counts as installed.
    """

    def __init__(
        self,
        repo: Path,
        *,
        root: Path | None = None,
        replay: ReplayRun | BaseException | None = None,
        runner: Runner | None = None,
        installed: bool | None = None,
        install_error: str = "install failed: a test context",
        install_failed: bool = False,
        thresholds: Mapping[str, float] | None = None,
        **manifest: object,
    ) -> None:
        workspace = _workspace(repo, root)
        found = dataclasses.replace(read_manifest(repo), **manifest)  # type: ignore[arg-type]
        if installed is None:
            installed = isinstance(replay, ReplayRun) or runner is not None
        env = _env(workspace.root) if installed else None
        super().__init__(
            workspace,
            found,
            env=env,
            install_error=install_error,
            install_failed=install_failed,
            thresholds=thresholds,
        )
        self._given_replay = replay
        self._runner = runner

    def replay_run(self) -> ReplayRun:
        if isinstance(self._given_replay, ReplayRun):
            return self._given_replay
        if isinstance(self._given_replay, BaseException):
            raise self._given_replay
        raise NotImplementedError("this FakeContext has no replay run")  # pragma: no cover

    def run(  # type: ignore[override]
        self, argv: Sequence[str], **_options: object
    ) -> tuple[RunResult, AuditLog]:
        if self._runner is None:
            self.require_env()
            raise NotImplementedError("this FakeContext has no runner")  # pragma: no cover
        result = self._runner(argv)
        self.outputs.append((" ".join(argv), f"{result.stdout}\n{result.stderr}"))
        return result, AuditLog()


def run_result(
    argv: Sequence[str], returncode: int | None = 0, stdout: str = "", stderr: str = ""
) -> RunResult:
    """A finished run's result, as `grader.sandbox.run` reports one."""
    return RunResult(list(argv), returncode, stdout, stderr, timed_out=False, duration=0.0, truncated=False)


def replay_run(*, opened: set[str] | None = None, command: Sequence[str] = ("make", "test")) -> ReplayRun:
    """A replay suite run that passed and opened ``opened`` (repo-relative paths)."""
    return ReplayRun(
        command=list(command),
        run=run_result(command),
        results=None,
        audit=AuditLog(opened=set(opened or ())),
        junit=None,
    )


def _workspace(repo: Path, root: Path | None) -> Workspace:
    root = root or repo.parent / f".grade-{repo.name}"
    root.mkdir(parents=True, exist_ok=True)
    return Workspace(root=root, repo=repo, commit=_head(repo), source=str(repo), pristine=repo)


def _head(repo: Path) -> str | None:
    """HEAD's sha when ``repo`` is a git repository with a commit, as `grader.acquire` records it."""
    if not (repo / ".git").exists():
        return None
    done = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "-q", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def _env(root: Path) -> Env:
    venv = root / "venv"
    return Env(
        venv=venv, python=venv / "bin" / "python", bin=venv / "bin", cached=True, duration=0.0, tool="uv"
    )
