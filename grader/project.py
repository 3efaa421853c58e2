"""The submission's own package, read statically: whether it installs, what it builds with, which Python.

A reviewer following a README runs ``pip install -e '.[test]'``: the project itself is installed, so its
entry points (a plugin registered under ``[project.entry-points]``), its version and its metadata exist
for the suite. `grader.install` does the same in the sandbox; this module only reads files (never runs
``setup.py``) to decide whether there is a package to install and what its build needs from the index.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from grader._json import mapping
from grader._toml import tomllib
from grader.requirements import Problem, poetry_specifier, vet_requirement
from grader.safeio import read_bytes
from grader.walk import tree

__all__ = ["Project", "read_project"]

# The files that define a package's metadata: a change to any of them is another install.
_METADATA_FILES = ("pyproject.toml", "setup.py", "setup.cfg", ".python-version")
_MAX_FILE = 1024 * 1024


@dataclass(frozen=True)
class Project:
    """What the grader knows about the submission's package before installing anything.

    ``installable``: a build backend is declared (``[build-system]``), or pip would build one anyway
    (``setup.py``/``setup.cfg``, a ``[project]`` table: setuptools), it declares entry points or scripts
    (or has setup files, which may), and the project does not opt out
    (``[tool.uv] package = false``, poetry ``package-mode = false``). ``why_not`` says why not, for the
    evidence. ``build_requires``: the build backend's requirements, each vetted like a dependency;
    ``refused`` the ones the grader will not fetch (then the project is not installed).
    ``requires_python``/``python_version``: the interpreter the project asks for, with where it says
    so. ``digest``: part of the venv's cache key: of the whole tree when the project is built (its build
    runs submission code into the venv), else of the metadata files.
    """

    name: str | None
    installable: bool
    why_not: str = ""
    build_requires: list[str] = field(default_factory=list)
    refused: list[Problem] = field(default_factory=list)
    requires_python: str | None = None
    requires_python_where: str = ""
    python_version: str | None = None  # first line of .python-version
    digest: str = ""


def _read(repo: Path, name: str) -> bytes | None:
    try:  # never through a link, never a FIFO, capped
        return read_bytes(repo / name, cap=_MAX_FILE, root=repo, truncate=True)
    except OSError:
        return None


def read_project(repo: Path) -> Project:
    """The submission's package as its files declare it (nothing is built or run)."""
    repo = Path(os.path.realpath(repo))
    raw = {name: _read(repo, name) for name in _METADATA_FILES}
    digest = hashlib.sha256()
    for name in _METADATA_FILES:
        digest.update(f"{name}\0".encode() + (raw[name] or b"") + b"\0")
    text = (raw["pyproject.toml"] or b"").decode("utf-8", "replace")
    try:
        data = tomllib.loads(text) if text else {}
    except (ValueError, RecursionError):  # TOMLDecodeError, and int() past its digit limit
        data = {}
    project = mapping(data.get("project"))
    tool = mapping(data.get("tool"))
    poetry = mapping(tool.get("poetry"))
    uv = mapping(tool.get("uv"))
    declared = project.get("name") or poetry.get("name")
    found = data.get("build-system")
    build = found if isinstance(found, dict) else None
    legacy = raw["setup.py"] is not None or raw["setup.cfg"] is not None

    why_not = ""
    if uv.get("package") is False:
        why_not = "pyproject.toml sets [tool.uv] package = false"
    elif poetry.get("package-mode") is False:
        why_not = "pyproject.toml sets [tool.poetry] package-mode = false"
    elif build is None and not legacy and not project and uv.get("package") is not True:
        # A [project] table alone is a package to pip (`pip install -e .` builds it with setuptools).
        why_not = "no package to install (no [project], [build-system], setup.py or setup.cfg)"
    elif not legacy and not _declares_entry_points(project, poetry):
        why_not = "it declares no entry points or scripts (its code runs from the checkout as it is)"

    requires: list[str] = []
    refused: list[Problem] = []
    lines = text.splitlines()
    entries = build.get("requires") if build is not None else None
    # No [build-system]: installers build with setuptools (setup.py, setup.cfg, [project] alone).
    for item in entries if isinstance(entries, list) else ["setuptools"]:
        where = _where(lines, item)
        if not isinstance(item, str):
            continue
        requirement, why = vet_requirement(item)
        if requirement is None:
            refused.append(Problem(where, item, f"a build requirement the grader will not fetch: {why}"))
        else:
            requires.append(requirement)
    if refused and not why_not:
        why_not = f"its build requirement {refused[0].location} is refused ({refused[0].why})"

    requires_python = project.get("requires-python")
    where = ""
    if isinstance(requires_python, str):
        where = _where(lines, requires_python)
    elif isinstance(mapping(poetry.get("dependencies")).get("python"), str):
        requires_python = _poetry_python(poetry["dependencies"]["python"])
        where = _where(lines, poetry["dependencies"]["python"])
    else:
        requires_python = None
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            requires_python = None
    pinned = (raw[".python-version"] or b"").decode("utf-8", "replace").strip().splitlines()
    return Project(
        name=declared if isinstance(declared, str) else None,
        installable=not why_not,
        why_not=why_not,
        build_requires=requires,
        refused=refused,
        requires_python=requires_python,
        requires_python_where=where,
        python_version=pinned[0].strip() if pinned and pinned[0].strip() else None,
        # A build runs code of the submission's (a build hook, an in-tree backend, setup.py) into the venv:
        # the venv is that checkout's own, never one another submission's build could have written.
        digest=_tree_digest(repo) if not why_not else digest.hexdigest()[:16],
    )


def _declares_entry_points(project: dict[str, Any], poetry: dict[str, Any]) -> bool:
    """Whether installing adds what the checkout alone lacks: entry points (a plugin) or scripts."""
    listed = project.get("dynamic")
    dynamic = listed if isinstance(listed, list) else []
    return (
        any(project.get(key) for key in ("entry-points", "scripts", "gui-scripts"))
        or any(key in dynamic for key in ("entry-points", "scripts", "gui-scripts"))
        or any(poetry.get(key) for key in ("plugins", "scripts"))
    )


_MAX_TREE_FILES = 50_000


def _tree_digest(repo: Path) -> str:
    """sha256 over every path and regular file's content (link targets for links), .git left out."""
    digest = hashlib.sha256()
    count = 0
    for dirpath, dirnames, filenames in tree(repo):  # no recursion: see grader/deeptree.py
        dirnames[:] = [d for d in dirnames if not (dirpath == str(repo) and d == ".git")]
        for name in sorted(filenames):
            count += 1
            if count > _MAX_TREE_FILES:
                return "tree-" + digest.hexdigest()[:16] + f"-{count}"
            path = os.path.join(dirpath, name)
            digest.update(os.path.relpath(path, repo).encode("utf-8", "surrogateescape") + b"\0")
            try:
                if os.path.islink(path):
                    digest.update(os.readlink(path).encode("utf-8", "surrogateescape"))
                elif os.path.isfile(path):
                    with open(path, "rb") as handle:
                        for chunk in iter(lambda: handle.read(1 << 20), b""):
                            digest.update(chunk)
            except OSError:
                digest.update(b"\1unreadable")
            digest.update(b"\0")
    return "tree-" + digest.hexdigest()[:16]


def _where(lines: list[str], text: object) -> str:
    for number, line in enumerate(lines, 1):
        if f'"{text}"' in line or f"'{text}'" in line:
            return f"pyproject.toml:{number}"
    return "pyproject.toml"


def _poetry_python(spec: str) -> str | None:
    return poetry_specifier(spec) or None
