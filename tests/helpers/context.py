"""A real `Context` over a folder, for tests of checks that read files (no install, no sandboxed run)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from grader.acquire import Workspace
from grader.context import Context
from grader.manifest import read_manifest

__all__ = ["folder_context"]


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
    `Context.require_env`. ``root`` (default: a ``.grade`` folder beside ``repo``) holds the logs."""
    root = root or repo.parent / f".grade-{repo.name}"
    root.mkdir(parents=True, exist_ok=True)
    workspace = Workspace(root=root, repo=repo, commit=None, source=str(repo), pristine=repo)
    found = dataclasses.replace(read_manifest(repo), **manifest)  # type: ignore[arg-type]
    return Context(workspace, found, env=None, install_error=install_error, thresholds=thresholds)
