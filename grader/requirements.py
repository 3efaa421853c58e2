"""The submission's declared dependencies, read statically and vetted before any installer sees them.

Installing is untrusted (docs/security.md): the installer receives only requirements the grader parsed
itself as PEP 508 requirements on a package name, fetched from the reviewer's package index. Everything
else a submission can write in a requirements file or in pyproject.toml is refused with a refusal naming
``file:line`` (the report carries it): installer options (``--find-links``, ``--index-url``, ``-e`` ...),
``-r``/``-c`` files outside the repository, local paths and archives, ``file:`` and VCS URLs, direct URL
references (``name @ url``). A line that is not a requirement at all (``pyopenssl>>1``) is the submission's
own failure, decided here from the grader's parse, never from an installer's log.

The grader's own test tools (``grader/rules/tools.toml``) are always added at their pinned versions; a
submission's requirement on one of them is replaced by the pin.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["Dependencies", "Problem", "grader_tools", "read_dependencies"]

_EXTRA_GROUPS = ("test", "tests", "testing", "dev")
_REQUIREMENT_FILES = ("requirements.txt", "requirements-dev.txt", "requirements-test.txt")
_TOOLS_FILE = Path(__file__).parent / "rules" / "tools.toml"
_MAX_FILE = 1024 * 1024  # a requirements file or pyproject.toml larger than this is not read
_MAX_NESTING = 10
_SHOWN = 120  # characters of an offending line quoted in a refusal
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:(//)?")
_VCS = ("git+", "hg+", "svn+", "bzr+")
_ARCHIVE = (".whl", ".tar.gz", ".tgz", ".tar.bz2", ".zip", ".tar")
# Per-requirement options that only restate integrity; dropped silently (the grader resolves afresh).
_HARMLESS_LINE_OPTIONS = ("--hash",)


@dataclass(frozen=True)
class Problem:
    """One line the grader would not pass to the installer: where, what it said, and why."""

    location: str  # "requirements.txt:4" or "pyproject.toml:12" (the file alone when no line is known)
    text: str
    why: str

    def line(self) -> str:
        return f"{self.location}: {self.why}: {self.text!r}"


@dataclass(frozen=True)
class Dependencies:
    """What the grader installs, and what it refused or could not read.

    ``requirements``: sorted, normalized PEP 508 strings, the grader's pinned tools included.
    ``refused``: installer options, paths, URLs (never installed; reported as findings).
    ``invalid``: lines that are not requirements (the submission's own install failure).
    ``overridden``: a submission's requirement on a grader tool whose specifier excluded the pin.
    ``tools``: the grader's pins, name -> version.
    """

    requirements: list[str]
    refused: list[Problem] = field(default_factory=list)
    invalid: list[Problem] = field(default_factory=list)
    overridden: list[Problem] = field(default_factory=list)
    tools: dict[str, str] = field(default_factory=dict)


def grader_tools() -> dict[str, str]:
    """The grader's pinned test tools (canonical name -> exact version), from ``rules/tools.toml``."""
    data = tomllib.loads(_TOOLS_FILE.read_text(encoding="utf-8"))
    return {canonicalize_name(name): str(version) for name, version in data["tools"].items()}


# --- reading files safely ---------------------------------------------------------------------------------


def _read_text(path: Path) -> str | None:
    """A regular file's text, never through a link, never blocking on a FIFO, at most ``_MAX_FILE`` bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_FILE:
            return None
        data = os.read(fd, _MAX_FILE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data[:_MAX_FILE].decode("utf-8", errors="replace")


def _inside(path: Path, repo: Path) -> Path | None:
    real = Path(os.path.realpath(path))
    return real if real.is_relative_to(repo) else None


# --- classifying one requirement string -------------------------------------------------------------------


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _classify(text: str) -> tuple[Requirement | None, str | None, bool]:
    """(requirement, why refused, invalid). Exactly one of a requirement or a reason is given."""
    if "${" in text:
        return None, "an environment variable reference (the installer would expand the grader's)", False
    lowered = text.lower()
    if lowered.startswith(_VCS):
        return None, "a VCS reference (installs come from the package index only)", False
    if _URL.match(text) and not re.match(r"^[A-Za-z0-9._-]+\s*[;\[<>=!~]", text):
        return None, "a URL (installs come from the package index only)", False
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        if (
            text.startswith((".", "/", "~", "\\"))
            or "/" in text
            or "\\" in text
            or lowered.endswith(_ARCHIVE)
        ):
            return None, "a local path or archive (installs come from the package index only)", False
        return None, f"not a valid requirement ({str(exc).splitlines()[0].strip()})", True
    if req.url:
        return None, "a direct URL reference (installs come from the package index only)", False
    return req, None, False


# --- requirements files -----------------------------------------------------------------------------------


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, line) with comments removed and backslash continuations joined, as pip reads."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        line = raw if not raw.lstrip().startswith("#") else ""
        line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0]
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = " ".join(part.strip() for part in pending).strip()
        pending = []
        if joined:
            yield start, joined
    if pending:
        joined = " ".join(part.strip() for part in pending).strip()
        if joined:
            yield start, joined


def _nested(line: str) -> tuple[str, str] | None:
    """("-r" | "-c", the file named) for a line that includes another file, else None."""
    for flag, short in (("--requirement", "-r"), ("--constraint", "-c"), ("-r", "-r"), ("-c", "-c")):
        if not line.startswith(flag):
            continue
        rest = line[len(flag) :]
        if flag.startswith("--") and rest and rest[0] not in " \t=":
            return None  # --requirementsfoo: some other option
        rest = rest.lstrip(" \t=").strip()
        return (short, rest) if rest else None
    return None


def _from_file(path: Path, repo: Path, seen: set[Path], out: _Collector, depth: int = 0) -> None:
    real = _inside(path, repo)
    if real is None or real in seen or depth > _MAX_NESTING:
        return
    seen.add(real)
    text = _read_text(real)
    if text is None:
        return
    rel = real.relative_to(repo).as_posix()
    for number, line in _logical_lines(text):
        where = f"{rel}:{number}"
        nested = _nested(line)
        if nested:
            target = Path(os.path.realpath(real.parent / nested[1]))
            if not target.is_relative_to(repo):
                out.refuse(where, line, "a requirements file outside the repository")
            elif nested[0] == "-r":
                _from_file(target, repo, seen, out, depth + 1)
            # A constraints file inside the repository only narrows versions: the resolver does without.
            continue
        if line.startswith("-"):
            option = line.split(None, 1)[0].split("=", 1)[0]
            out.refuse(
                where, line, f"an installer option ({option}); the grader installs from the index only"
            )
            continue
        requirement, *options = re.split(r"\s+(?=--?[A-Za-z])", line)
        for option in options:
            if not option.startswith(_HARMLESS_LINE_OPTIONS):
                name = option.split(None, 1)[0].split("=", 1)[0]
                out.refuse(where, option, f"a per-requirement installer option ({name}), left out")
        out.add(where, requirement)


# --- pyproject.toml ---------------------------------------------------------------------------------------


def _locate(lines: list[str], text: str) -> int | None:
    for number, line in enumerate(lines, 1):
        if f'"{text}"' in line or f"'{text}'" in line:
            return number
    return None


def _dependency_group(groups: dict[str, Any], name: str, depth: int = 0) -> Iterator[str]:
    if depth > _MAX_NESTING:
        return
    for item in groups.get(name) or []:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
            yield from _dependency_group(groups, item["include-group"], depth + 1)


class _Collector:
    def __init__(self, self_name: str | None) -> None:
        self.self_name = self_name
        self.requirements: dict[str, Requirement] = {}
        self.where: dict[str, str] = {}
        self.refused: list[Problem] = []
        self.invalid: list[Problem] = []

    def refuse(self, where: str, text: str, why: str) -> None:
        self.refused.append(Problem(where, _shown(text), why))

    def add(self, where: str, text: str) -> None:
        text = text.strip()
        if not text:
            return
        requirement, why, invalid = _classify(text)
        if requirement is None:
            problem = Problem(where, _shown(text), why or "not a requirement")
            (self.invalid if invalid else self.refused).append(problem)
            return
        if self.self_name and canonicalize_name(requirement.name) == self.self_name:
            return  # an extra pulling in the project itself: the submission runs from its checkout
        self.requirements.setdefault(str(requirement), requirement)
        self.where.setdefault(str(requirement), where)


def read_dependencies(repo: Path) -> Dependencies:
    """The submission's requirements, statically: pyproject first, else the requirements files.

    From pyproject.toml: ``[project] dependencies``, the ``test``/``tests``/``testing``/``dev`` extras and
    dependency groups. Without any of those: ``requirements.txt``, ``requirements-dev.txt`` and
    ``requirements-test.txt`` with the files they ``-r`` inside the repository.
    """
    repo = Path(os.path.realpath(repo))
    text = _read_text(repo / "pyproject.toml") or ""
    try:
        data = tomllib.loads(text) if text else {}
    except (tomllib.TOMLDecodeError, RecursionError):  # a nesting bomb is malformed TOML too
        data = {}
    found = data.get("project")
    project: dict[str, Any] = found if isinstance(found, dict) else {}
    name = project.get("name")
    out = _Collector(canonicalize_name(name) if isinstance(name, str) and name.strip() else None)
    lines = text.splitlines()

    def from_pyproject(items: object) -> None:
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, str):
                continue
            number = _locate(lines, item)
            where = f"pyproject.toml:{number}" if number else "pyproject.toml"
            if item.strip().startswith("-"):
                out.refuse(where, item, "an installer option; installs come from the index only")
            else:
                out.add(where, item)

    declared = isinstance(project.get("dependencies"), list) or isinstance(
        project.get("optional-dependencies"), dict
    )
    from_pyproject(project.get("dependencies"))
    extras = project.get("optional-dependencies")
    if isinstance(extras, dict):
        for group in _EXTRA_GROUPS:
            from_pyproject(extras.get(group))
    groups = data.get("dependency-groups")
    if isinstance(groups, dict):
        declared = True
        for group in _EXTRA_GROUPS:
            from_pyproject(list(_dependency_group(groups, group)))
    if not declared:
        seen: set[Path] = set()
        for file_name in _REQUIREMENT_FILES:
            _from_file(repo / file_name, repo, seen, out)
    return _with_tools(out)


def _with_tools(out: _Collector) -> Dependencies:
    tools = grader_tools()
    overridden: list[Problem] = []
    kept: list[str] = []
    for text, requirement in out.requirements.items():
        name = canonicalize_name(requirement.name)
        if name not in tools:
            kept.append(text)
            continue
        if requirement.specifier and not requirement.specifier.contains(tools[name], prereleases=True):
            why = f"the grader runs its pinned {name} {tools[name]} instead"
            overridden.append(Problem(out.where[text], _shown(text), why))
    kept += [f"{name}=={version}" for name, version in tools.items()]
    return Dependencies(
        requirements=sorted(set(kept)),
        refused=out.refused,
        invalid=out.invalid,
        overridden=overridden,
        tools=tools,
    )
