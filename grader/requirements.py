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

A lockfile (``uv.lock``, ``poetry.lock``) is honoured as constraints: every package it pins from a package
index is installed at the locked version when something the submission declares needs it, so the suite
meets the SDK versions its recordings were made with. The lockfile is read as data (TOML), never run.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from grader._json import mapping
from grader._toml import tomllib
from grader.details import counted

__all__ = [
    "Dependencies",
    "Problem",
    "build_extras",
    "grader_tools",
    "poetry_specifier",
    "read_dependencies",
    "vet_requirement",
]

_EXTRA_GROUPS = ("test", "tests", "testing", "dev")
# Read in this order; the first one present is honoured (a project has one).
_LOCKFILES = ("uv.lock", "poetry.lock")
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
    ``constraints``: ``name==version`` pins read from the lockfile (never a grader tool or one of its
    ``[companions]``), installed as constraints: they fix a version, they add no package.
    ``lockfile``: the lockfile the constraints came from ("uv.lock"), or None.
    ``sources``: where the requirements were read, for the evidence ("pyproject.toml [project]
    dependencies", "extras test, dev", "requirements.txt").
    """

    requirements: list[str]
    refused: list[Problem] = field(default_factory=list)
    invalid: list[Problem] = field(default_factory=list)
    overridden: list[Problem] = field(default_factory=list)
    tools: dict[str, str] = field(default_factory=dict)
    constraints: list[str] = field(default_factory=list)
    lockfile: str | None = None
    sources: list[str] = field(default_factory=list)

    def described(self) -> str:
        """One line for the evidence: what was read, from where, pinned by which lockfile."""
        submitted = [r for r in self.requirements if canonicalize_name(Requirement(r).name) not in self.tools]
        where = "; ".join(self.sources) or "no dependency declaration"
        line = f"{counted(len(submitted), 'requirement')} from {where}"
        if self.lockfile:
            line += f", pinned by {self.lockfile} ({counted(len(self.constraints), 'locked version')})"
        return line


def grader_tools() -> dict[str, str]:
    """The grader's pinned test tools (canonical name -> exact version), from ``rules/tools.toml``."""
    data = tomllib.loads(_TOOLS_FILE.read_text(encoding="utf-8"))
    return {canonicalize_name(name): str(version) for name, version in data["tools"].items()}


def build_extras(requires: list[str]) -> list[str]:
    """What the build backends among ``requires`` ask for at build time (``[build-extras]`` in
    rules/tools.toml), for an offline build without isolation (grader.install)."""
    data = tomllib.loads(_TOOLS_FILE.read_text(encoding="utf-8"))
    table = data.get("build-extras") or {}
    extras: list[str] = []
    for line in requires:
        try:
            name = canonicalize_name(Requirement(line).name)
        except InvalidRequirement:
            continue
        extras += [str(x) for x in table.get(name, []) if str(x) not in extras]
    return extras


def _companions() -> set[str]:
    """What the pinned tools depend on (``[companions]`` in rules/tools.toml): no lockfile pins these."""
    data = tomllib.loads(_TOOLS_FILE.read_text(encoding="utf-8"))
    return {canonicalize_name(str(n)) for n in (data.get("companions") or {}).get("names", [])}


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


def vet_requirement(text: str) -> tuple[str | None, str]:
    """(the normalized requirement, "") for a requirement the installer may fetch from the index, else
    (None, why it is refused)."""
    requirement, why, _invalid = _classify(text.strip())
    return (str(requirement), "") if requirement is not None else (None, why or "not a requirement")


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
    dependency groups, and poetry's ``[tool.poetry.dependencies]`` with its groups and extras of those
    names (``[tool.poetry.group.dev.dependencies]``, ``[tool.poetry.dev-dependencies]``). Without any of
    those: ``requirements.txt``, ``requirements-dev.txt`` and ``requirements-test.txt`` with the files they
    ``-r`` inside the repository. The lockfile's pins come along as constraints (`_lock_pins`).
    """
    repo = Path(os.path.realpath(repo))
    text = _read_text(repo / "pyproject.toml") or ""
    try:
        data = tomllib.loads(text) if text else {}
    except (ValueError, RecursionError):  # a nesting bomb, a 5,000-digit integer: malformed TOML too
        data = {}
    project = mapping(data.get("project"))
    tool = mapping(data.get("tool"))
    poetry = mapping(tool.get("poetry"))
    name = project.get("name") or poetry.get("name")
    out = _Collector(canonicalize_name(name) if isinstance(name, str) and name.strip() else None)
    lines = text.splitlines()
    sources: list[str] = []

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
    if isinstance(project.get("dependencies"), list):
        sources.append("pyproject.toml [project] dependencies")
    from_pyproject(project.get("dependencies"))
    extras = project.get("optional-dependencies")
    named = _named_by_instructions(repo)
    wanted = [*_EXTRA_GROUPS, *(n for n, _ in named.groups if n not in _EXTRA_GROUPS)]
    if isinstance(extras, dict):
        chosen = _chosen(extras, wanted)
        if chosen:
            sources.append(f"extras {', '.join(chosen)}" + _named_where(named, chosen))
        for group in chosen:
            from_pyproject(extras.get(group))
    groups = data.get("dependency-groups")
    if isinstance(groups, dict):
        declared = True
        chosen = _chosen(groups, wanted)
        if chosen:
            sources.append(f"dependency groups {', '.join(chosen)}" + _named_where(named, chosen))
        for group in chosen:
            from_pyproject(list(_dependency_group(groups, group)))
    if poetry:
        declared = _from_poetry(poetry, lines, out, sources, wanted) or declared
    seen: set[Path] = set()
    # Files the README, Makefile or CI installs with `pip install -r`, whatever else is declared.
    for file_name, where in named.files:
        if (repo / file_name).is_file() and _inside(repo / file_name, repo) is not None:
            sources.append(f"{file_name} (named at {where})")
            _from_file(repo / file_name, repo, seen, out)
    if not declared:
        for file_name in _REQUIREMENT_FILES:
            if (repo / file_name).is_file() and _inside(repo / file_name, repo) not in seen:
                sources.append(file_name)
            _from_file(repo / file_name, repo, seen, out)
    constraints, lockfile = _lock_pins(repo, out)
    deps = _with_tools(out)
    kept = set(deps.tools) | _companions()
    pins = [c for c in constraints if canonicalize_name(Requirement(c).name) not in kept]
    return Dependencies(
        requirements=deps.requirements,
        refused=deps.refused,
        invalid=deps.invalid,
        overridden=deps.overridden,
        tools=deps.tools,
        constraints=pins,
        lockfile=lockfile,
        sources=sources,
    )


# --- what the README, Makefile and CI install -------------------------------------------------------------

_INSTRUCTIONS = ("README.md", "README.rst", "README.txt", "README", "Makefile", "makefile", "GNUmakefile")
_WORKFLOWS = ".github/workflows"
_MAX_WORKFLOWS = 20
_INSTALLS = re.compile(r"\b(?:pip3?|uv|poetry|pdm|hatch)\b.*\b(?:install|sync|add|run)\b")
_EXTRAS = re.compile(r"(?:^|[\s'\"=])\.\[([A-Za-z0-9_.,\- ]+)\]")
_OPTION = re.compile(r"--(extra|group|with|only)[= ]+['\"]?([A-Za-z0-9_.\-]+)")
_REQ_FILE = re.compile(r"(?:^|\s)(?:-r|--requirement)[= ]*['\"]?([A-Za-z0-9_./\-]+\.(?:txt|in))")


@dataclass
class _Named:
    groups: list[tuple[str, str]] = field(default_factory=list)  # (extra or group name, file:line)
    files: list[tuple[str, str]] = field(default_factory=list)  # (requirements file, file:line)


def _named_by_instructions(repo: Path) -> _Named:
    """Extras, groups and requirement files the README, Makefile or CI workflows install
    (``pip install -e '.[test,ci]'``, ``uv sync --extra ci --group lint``, ``poetry install --with
    test``, ``pip install -r requirements/dev.txt``): read as text, never run."""
    named = _Named()
    files = [Path(name) for name in _INSTRUCTIONS]
    workflows = repo / _WORKFLOWS
    # Never through a link out of the repository (.github itself may be one).
    if _inside(workflows, repo) is not None and workflows.is_dir() and not workflows.is_symlink():
        found = sorted(p for p in workflows.iterdir() if p.suffix in (".yml", ".yaml"))
        files += [p.relative_to(repo) for p in found[:_MAX_WORKFLOWS] if _inside(p, repo) is not None]
    for rel in files:
        text = _read_text(repo / rel)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if not _INSTALLS.search(line):
                continue
            where = f"{rel.as_posix()}:{number}"
            for match in _EXTRAS.finditer(line):
                for extra in match.group(1).split(","):
                    if extra.strip():
                        named.groups.append((_normal(extra), where))
            for _kind, name in _OPTION.findall(line):
                named.groups.append((_normal(name), where))
            for name in _REQ_FILE.findall(line):
                if not any(name == f for f, _ in named.files):
                    named.files.append((name.removeprefix("./"), where))
    return named


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def _chosen(table: dict[str, Any], wanted: list[str]) -> list[str]:
    """The keys of ``table`` (extras or groups) among ``wanted``, compared as normalized names."""
    by_normal = {_normal(key): key for key in table if isinstance(key, str)}
    return list(dict.fromkeys(by_normal[w] for w in wanted if w in by_normal))


def _named_where(named: _Named, chosen: list[str]) -> str:
    places = list(dict.fromkeys(where for n, where in named.groups if n in {_normal(c) for c in chosen}))
    return f" (named at {', '.join(places[:2])})" if places else ""


# --- poetry -----------------------------------------------------------------------------------------------


def _from_poetry(
    poetry: dict[str, Any], lines: list[str], out: _Collector, sources: list[str], wanted: list[str]
) -> bool:
    """Poetry's own tables: main dependencies, the test/dev groups, and extras of those names.

    True when poetry declares dependencies (then no requirements file is read).
    """
    main = mapping(poetry.get("dependencies"))
    tables: list[tuple[str, dict[str, Any]]] = [("[tool.poetry.dependencies]", main)] if main else []
    legacy = poetry.get("dev-dependencies")
    if isinstance(legacy, dict):
        tables.append(("[tool.poetry.dev-dependencies]", legacy))
    groups = mapping(poetry.get("group"))
    for group in _chosen(groups, wanted):
        table = groups.get(group)
        if isinstance(table, dict) and isinstance(table.get("dependencies"), dict):
            tables.append((f"[tool.poetry.group.{group}.dependencies]", table["dependencies"]))
    extras = mapping(poetry.get("extras"))
    wanted_optional = {
        canonicalize_name(n)
        for group in _chosen(extras, wanted)
        for n in (extras.get(group) or [])
        if isinstance(n, str)
    }
    if tables:
        sources.append("pyproject.toml " + ", ".join(label for label, _ in tables))
    for _label, table in tables:
        for key, spec in table.items():
            if not isinstance(key, str) or canonicalize_name(key) == "python":
                continue
            number = _locate_key(lines, key)
            where = f"pyproject.toml:{number}" if number else "pyproject.toml"
            for item in spec if isinstance(spec, list) else [spec]:  # a list: one entry per marker
                text, why, optional = _poetry_requirement(key, item)
                if why is not None:
                    out.refuse(where, f"{key} = {item!r}", why)
                elif text is not None and (not optional or canonicalize_name(key) in wanted_optional):
                    out.add(where, text)
    return bool(tables)


def _locate_key(lines: list[str], key: str) -> int | None:
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    for number, line in enumerate(lines, 1):
        if pattern.match(line):
            return number
    return None


def _poetry_requirement(name: str, spec: object) -> tuple[str | None, str | None, bool]:
    """(PEP 508 text, why refused, optional) for one poetry dependency entry."""
    extras = ""
    markers = ""
    optional = False
    if isinstance(spec, dict):
        for source in ("git", "path", "url", "file"):
            if source in spec:
                return None, f"a {source} dependency (installs come from the package index only)", False
        optional = bool(spec.get("optional"))
        wanted = spec.get("extras")
        if isinstance(wanted, list) and all(isinstance(e, str) for e in wanted) and wanted:
            extras = "[" + ",".join(wanted) + "]"
        if isinstance(spec.get("markers"), str):
            markers = spec["markers"]
        spec = spec.get("version", "*")
    if not isinstance(spec, str):
        return None, None, optional
    specifier = poetry_specifier(spec)
    text = f"{name}{extras}{specifier}" + (f"; {markers}" if markers else "")
    return text, None, optional


def poetry_specifier(spec: str) -> str:
    """Poetry's version syntax as PEP 440: ``^1.2`` -> ``>=1.2,<2.0``; unreadable -> no bound (the
    lockfile, when there is one, pins the version anyway)."""
    parts = []
    for piece in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", spec.strip()):
        if not piece or piece == "*":
            continue
        match = re.fullmatch(r"([\^~]|[<>=!~]=?|==)?\s*(\d+(?:\.\d+)*)(\.\*)?", piece)
        if not match:
            return ""
        op, version, star = match.group(1) or "", match.group(2), match.group(3) or ""
        numbers = [int(n) for n in version.split(".")]
        if op == "^":
            first = next((i for i, n in enumerate(numbers) if n), len(numbers) - 1)
            upper = [*numbers[:first], numbers[first] + 1]
            parts += [f">={version}", "<" + ".".join(map(str, upper))]
        elif op == "~":
            cut = 1 if len(numbers) == 1 else 2
            upper = [*numbers[: cut - 1], numbers[cut - 1] + 1]
            parts += [f">={version}", "<" + ".".join(map(str, upper))]
        elif op == "":
            parts.append(f"=={version}{star}")
        else:
            parts.append(f"{op}{version}{star}")
    return ",".join(parts)


# --- lockfiles --------------------------------------------------------------------------------------------


def _lock_pins(repo: Path, out: _Collector) -> tuple[list[str], str | None]:
    """``name==version`` for every package the lockfile pins from a package index, and the lockfile's name.

    Packages locked from git, a URL or a path (the project itself among them) are left out; so is a
    package locked at several versions (a split by Python version or platform), which the installer
    then resolves within the declared bounds.
    """
    for name in _LOCKFILES:
        text = _read_text(repo / name)
        if text is None:
            continue
        try:
            data = tomllib.loads(text)
        except (ValueError, RecursionError):  # TOMLDecodeError, and int() past its digit limit
            out.refuse(name, name, "not valid TOML; its pins were not used")
            return [], None
        versions: dict[str, set[str]] = {}
        for package in data.get("package") or []:
            if not isinstance(package, dict):
                continue
            pkg, version = package.get("name"), package.get("version")
            if not isinstance(pkg, str) or not isinstance(version, str) or not _from_index(package):
                continue
            versions.setdefault(canonicalize_name(pkg), set()).add(version)
        pins = []
        for pkg, found in sorted(versions.items()):
            if len(found) != 1:
                continue
            requirement, _why, _invalid = _classify(f"{pkg}=={next(iter(found))}")
            if requirement is not None:
                pins.append(str(requirement))
        return pins, name
    return [], None


def _from_index(package: dict[str, Any]) -> bool:
    source = package.get("source")
    if source is None:  # poetry: no source table means the default index
        return True
    if not isinstance(source, dict):
        return False
    return "registry" in source  # uv.lock; poetry's git/url/directory/file sources are not an index


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
