"""Tamper evidence: a static scan for code that can change reported test outcomes, and the guard plugin.

``scan(repo)`` reads (never imports) the submission's conftest files, the plugins its pytest configuration
names, its Makefile and its Python sources, and lists every place that can make a failing suite look green:

* outcome hooks in conftest files and plugins: ``pytest_runtest_makereport``, ``pytest_report_teststatus``,
  ``pytest_runtest_protocol``, ``pytest_runtest_call``, ``pytest_pyfunc_call``, a ``pytest_runtest_logreport``
  that assigns to the report, ``pytest_collection_modifyitems`` adding skip/xfail marks or dropping items,
  ``pytest_runtest_setup`` calling skip/xfail, ``pytest_sessionfinish`` touching the exit status;
* monkeypatching of pytest's internals (``_pytest.*``, ``TestReport``, ``CallInfo``) anywhere in the tree,
  and any assignment to ``<something>.outcome`` in a conftest or plugin;
* references to the grader's own machinery (its variables, its plugin modules), and a Makefile or
  pytest config that switches plugins off (``-p no:``), drops ``PYTEST_ADDOPTS`` or passes ``--noconftest``.

``grader/audit/_grader_guard.py`` is the grader's second pytest plugin (``-p _pytest_outcomes``). It records
each test's outcome as the runner saw it (``call.excinfo``, read before any other hook wrapper can touch
it) next to the outcome finally reported, and writes through an inherited file descriptor rather than a
path. With ``PYTEST_RUN_SKIPPED=1`` it strips skip/skipif/xfail marks after every other collection hook
ran, so tests the suite skipped are run and their real outcome is known. See docs/security.md for what this
does and does not guarantee.
"""

from __future__ import annotations

import ast
import configparser
import errno
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import pysource, unshadow, walk
from grader._toml import tomllib
from grader.audit._grader_startup import LATER as _LATER_STDLIB
from grader.audit._grader_startup import standard_spec
from grader.pytest_config import addopts_text, ini_sections, is_test_module
from grader.safeio import UnsafeFile, read_bytes, within

__all__ = [
    "CLEAN_LAUNCHER",
    "GUARD_MODULE",
    "GuardLog",
    "Hook",
    "Send",
    "TamperScan",
    "in_tree",
    "read_guard",
    "scan",
    "write_guard",
]

# The names a run sees (`-p` in PYTEST_ADDOPTS, the clean launcher's path) say nothing of a grader: a
# submission must not be able to tell a graded run from an ordinary `make test` by them (docs/security.md).
GUARD_MODULE = "_pytest_outcomes"
RESULTS_MODULE = "_pytest_results"  # grader/audit/_grader_pytest.py, as the run loads it
_LONGREPR_MODULE = "_pytest_longrepr"  # grader/audit/_pytest_longrepr.py, the same name everywhere
# Copied, never imported here: it runs inside the submission's pytest process, from a grader-owned folder
# put first on PYTHONPATH so a same-named file in the submission cannot shadow it.
_GUARD_FILE = Path(__file__).resolve().parent / "audit" / "_grader_guard.py"
_STARTUP_FILE = _GUARD_FILE.parent / "_grader_startup.py"
_CLEAN_FILE = _GUARD_FILE.parent / "_grader_clean.py"
_RESULTS_FILE = _GUARD_FILE.parent / "_grader_pytest.py"
_LONGREPR_FILE = _GUARD_FILE.parent / f"{_LONGREPR_MODULE}.py"  # imported by both plugins
CLEAN_LAUNCHER = "_pytest_main.py"
_MAX_FILES = 5000
_MAX_BYTES = 1_000_000
_GUARD_CAP = 64 * 1024**2
_ALWAYS = {
    "pytest_runtest_makereport": "rewrites or replaces test reports",
    "pytest_report_teststatus": "changes how outcomes are counted and shown",
    "pytest_runtest_protocol": "replaces the whole per-test protocol",
    "pytest_runtest_call": "wraps the test call (can swallow its exception)",
    "pytest_pyfunc_call": "replaces the test function call (can swallow its exception)",
}
_SKIP_CALLS = {"skip", "xfail", "skipif"}
_PYTEST_PLUGINS_VAR = re.compile(
    r"""\bPYTEST_PLUGINS\s*[:?+!]?=\s*["']?([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)"""
)
_PYTEST_INTERNALS = {"TestReport", "CallInfo", "CollectReport", "runner", "reports", "skipping", "outcomes"}
_GRADER_NAMES = re.compile(
    r"\b(GRADER_[A-Z_]+|_grader_(?:pytest|audit|guard)|PY_AUDIT_(?:LOG|ROOT)|PY_SOURCE_PATH|PYTEST_RESULT_LOG"
    r"|PYTEST_REPORT_(?:FD|NONCE)|PYTEST_RUN_(?:SKIPPED|ALL)|_pytest_(?:outcomes|results|longrepr|main))\b"
)
_CONFIG_TAMPER = re.compile(
    r"(-p\s*no:\S+|--noconftest|PYTEST_ADDOPTS\s*=|PYTEST_DISABLE_PLUGIN_AUTOLOAD|--junit-?xml\S*|-o\s*addopts)"
)
# Imported by `site` at interpreter start-up from the first sys.path entry holding one: before any pytest
# plugin, the guard included, whenever the folder is on the start-up path (PYTHONPATH=. in a Makefile).
_STARTUP_MODULES = {"sitecustomize.py", "usercustomize.py"}
_UNREADABLE_WHY = (
    "pytest loads this file but the grader cannot parse it (too deeply nested, or not Python it reads)"
)
_STARTUP_WHY = "runs at interpreter start-up, before the grader's guard, when its folder is on the path"
# Modules pytest (or the grader) imports before the guard plugin loads: a same-named top-level module in
# the tree stands in for it when the tree's root is put on the start-up path.
_SHADOWABLE = frozenset(
    {"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup", "tomli", "colorama"}
    | {"pytest_socket", GUARD_MODULE, RESULTS_MODULE, _LONGREPR_MODULE, "_grader_pytest", "_grader_audit"}
    | {"sitecustomize", "usercustomize"}
)
_SHADOW_WHY = "which is imported before the grader's guard when its folder is on the path"
# Red team 24, F2: standard-library modules pytest imports once its `pythonpath` put the tree first, and those
# this platform lacks (tried while pytest is imported). The grader's start-up code keeps both to the standard
# library (grader/audit/_grader_startup.py); listed, because without the grader they run in every session.
_STDLIB_WHY = (
    "stands in for the standard library's {name}, which pytest imports in every session once the tree is "
    "first on the path: without the grader it runs before any conftest (the grader loads the real one)"
)
_ABSENT_WHY = (
    "is named like {name}, a standard-library module this platform lacks that Python tries while importing "
    "pytest: without the grader it runs before any plugin (the grader keeps the name missing)"
)
_COMPILED = re.compile(r"^([A-Za-z_]\w*)(?:\.[\w-]+)?\.(?:pyc|so|pyd)$")
_SOURCE = re.compile(r"^([A-Za-z_]\w*)\.py$")
_CONFIG_FILES = (
    "pyproject.toml",
    "pytest.ini",
    "setup.cfg",
    "tox.ini",
    "Makefile",
    "GNUmakefile",
    "makefile",
)


@dataclass(frozen=True)
class Hook:
    """One place that can change reported outcomes."""

    kind: str  # hook name, "monkeypatch", "grader-reference", "config", "startup" or "unreadable"
    location: str  # repo-relative "file:line"
    why: str

    def __str__(self) -> str:
        return f"{self.location}: {self.kind} ({self.why})"


@dataclass
class TamperScan:
    hooks: list[Hook] = field(default_factory=list)
    files_scanned: int = 0
    # Test modules (relative paths) hiding a test before collection that the whole-suite run can bring back
    shadowed: list[str] = field(default_factory=list)
    # Test modules named with look-alike letters (red team 25, F5): the whole-suite run copies them to their
    # ASCII names
    look_alike_files: list[str] = field(default_factory=list)
    # Folders holding test modules that pytest's default `norecursedirs` never enters (red team 26, F3:
    # tests/build/); the whole-suite run renames them in its copy
    unentered: list[str] = field(default_factory=list)

    @property
    def outcome_hooks(self) -> list[Hook]:
        """Hooks in conftest files or plugins (what a ``--noconftest`` rerun takes away)."""
        return [h for h in self.hooks if h.kind.startswith("pytest_")]

    @property
    def startup_hooks(self) -> list[Hook]:
        """Files Python runs at interpreter start-up, before any plugin (what the clean rerun takes away)."""
        return [h for h in self.hooks if h.kind == "startup"]


# --- walking the tree without following links -------------------------------------------------------------


def _python_files(repo: Path) -> Iterator[Path]:
    # Hidden folders are read too (as before): only VCS data, installed third-party code and caches are
    # skipped (grader/walk.py's SKIPPED).
    # A name that reads `.py` counts (`test_x.py ` with a trailing space, `.py` and a zero-width space):
    # pytest passes over it, and the whole-suite copy brings it back under its ASCII name.
    return walk.files(
        repo,
        include=lambda name: name.endswith(".py") or unshadow.ascii_skeleton(name).endswith(".py"),
        max_files=_MAX_FILES,
    )


def _read(path: Path) -> str | None:
    # No link, no FIFO, no device, nothing over the cap (grader/safeio.py).
    try:
        return read_bytes(path, cap=_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


# pytest's default `norecursedirs` less the virtualenvs and node_modules (third-party code, which the walk
# skips) and the dot folders (below).
_UNENTERED = frozenset({"build", "dist", "_darcs", "CVS", "{arch}"})


def _unentered_folder(rel: Path, roots: list[str]) -> str | None:
    """The outermost folder above test module ``rel`` that pytest's default collection skips, when ``rel``
    is below one of the configuration's ``testpaths`` (``roots``; none set: anywhere); else None. A dot
    folder (``tests/.slow/``) counts below a testpath, or below a ``tests``/``test`` folder when none is
    set: elsewhere (``.github/``) it holds tooling, not the suite."""
    where = rel.as_posix()
    if roots and not any(root in ("", ".") or where.startswith(f"{root}/") for root in roots):
        return None
    for i, part in enumerate(rel.parts[:-1]):
        dotted = part.startswith(".") and (bool(roots) or any(p in ("tests", "test") for p in rel.parts[:i]))
        if part in _UNENTERED or part.endswith(".egg") or dotted:
            return "/".join(rel.parts[: i + 1])
    return None


# Folders pytest never enters that the tree walk skips too (third-party code, walk.THIRD_PARTY): test modules
# of the submission's own hidden there (`tests/venv/test_x.py`) are looked for below the test roots only,
# and never inside an installed package's folder.
_ENV_FOLDERS = frozenset({"venv", ".venv", "node_modules"})
_INSTALLED = walk.VCS | {"site-packages", "dist-packages", "__pycache__"}
_ENV_DEPTH = 3


def _env_folders(repo: Path, roots: list[str]) -> Iterator[tuple[str, str]]:
    """(folder, its first test module), both repository-relative, for each folder below the test roots
    (``testpaths``; none set: ``tests/`` and ``test/``) that pytest skips as an environment: named like one
    (``venv``, ``.venv``, ``node_modules``) or holding a ``pyvenv.cfg``."""
    for base in roots or ["tests", "test"]:
        top = within(repo, base) if base not in ("", ".") else repo
        if top is None or top.is_symlink() or not top.is_dir():
            continue
        for folder in walk.folders(top, depth=_ENV_DEPTH, skip=_INSTALLED):
            marked = (folder / "pyvenv.cfg").is_file() and not (folder / "pyvenv.cfg").is_symlink()
            if folder.name not in _ENV_FOLDERS and not marked:
                continue
            found = walk.files(folder, skip=_INSTALLED, include=is_test_module, depth=_ENV_DEPTH, max_files=1)
            first = next(iter(found), None)
            if first is not None:
                yield _rel(repo, folder), _rel(repo, first)


def _testpaths(repo: Path) -> list[str]:
    return [p.strip("/") for _, options in ini_sections(repo) for p in _as_list(options.get("testpaths"))]


def _as_list(value: object) -> list[str]:
    if isinstance(value, str):
        return value.split()
    return [str(v) for v in value] if isinstance(value, list) else []


def _stdlib_stand_in(name: str) -> bool:
    """A standard-library name pytest imports late, or one this platform lacks (``nt``, ``msvcrt``)."""
    if name not in sys.stdlib_module_names or name in sys.builtin_module_names:
        return False
    return name in _LATER_STDLIB or standard_spec(name) is None


def _top_level_modules(repo: Path) -> Iterator[tuple[str, str]]:
    """(module name, repo-relative file) of each module the root or src/ offers to an import: source,
    compiled (``x.pyc``, ``x.cpython-311-x86_64-linux-gnu.so``), or a package's ``__init__.py``. A folder
    without one is a namespace portion, which any regular module of the name found later wins over."""
    for base in (repo, repo / "src"):
        if base.is_symlink():
            continue
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                name, rel = entry.name, f"{entry.name}/__init__.py"
                if not os.path.lexists(os.path.join(entry.path, "__init__.py")):
                    continue
            elif match := _COMPILED.match(entry.name) or _SOURCE.match(entry.name):
                name, rel = match.group(1), entry.name
            else:
                continue
            yield name, _rel(repo, base / rel)


def _shadow_hooks(repo: Path) -> Iterator[Hook]:
    """A top-level module standing in for one the session imports before the grader's guard (pytest, its
    dependencies, the guard itself), or for a standard-library module (``_stdlib_stand_in``)."""
    for name, rel in _top_level_modules(repo):
        if name in _SHADOWABLE:
            yield Hook("startup", f"{rel}:1", f"shadows {name}, {_SHADOW_WHY}")
        elif _stdlib_stand_in(name):
            why = _STDLIB_WHY if name in _LATER_STDLIB else _ABSENT_WHY
            yield Hook("startup", f"{rel}:1", why.format(name=name))


def _rel(repo: Path, path: Path) -> str:
    try:
        return path.relative_to(repo).as_posix()
    except ValueError:
        return path.name


# --- which files are plugins ------------------------------------------------------------------------------


def _ini_addopts(repo: Path) -> str:
    return " ".join(addopts_text(options) for _, options in ini_sections(repo))


def _entry_point_plugins(repo: Path) -> list[str]:
    """Modules the project registers as pytest plugins (``pytest11`` entry points) in its pyproject.toml or
    setup.cfg: installed with the project, pytest loads them like a conftest (red-team R8)."""
    modules: list[str] = []
    text = _read(repo / "pyproject.toml")
    if text:
        try:
            data = tomllib.loads(text)
        except (ValueError, RecursionError):  # TOMLDecodeError, and int() past its digit limit
            data = {}
        project = data.get("project") if isinstance(data.get("project"), dict) else {}
        points = (project.get("entry-points") or {}).get("pytest11") if isinstance(project, dict) else None
        poetry = data.get("tool", {}).get("poetry", {}) if isinstance(data.get("tool"), dict) else {}
        plugins = poetry.get("plugins") if isinstance(poetry, dict) else None
        for table in (points, (plugins or {}).get("pytest11") if isinstance(plugins, dict) else None):
            if isinstance(table, dict):
                modules += [str(v) for v in table.values()]
    text = _read(repo / "setup.cfg")
    if text:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text)
            if parser.has_option("options.entry_points", "pytest11"):
                lines = parser.get("options.entry_points", "pytest11").splitlines()
                modules += [line.split("=", 1)[1] for line in lines if "=" in line]
        except configparser.Error:
            pass
    text = _read(repo / "setup.py") or ""
    # setup.py's entry_points are code; a literal "pytest11" list names its modules as "name = module".
    for block in re.findall(r"['\"]pytest11['\"]\s*:\s*\[([^\]]*)\]", text):
        modules += [m for m in re.findall(r"=\s*([A-Za-z_][\w.]*)", block)]
    return [m.split(":", 1)[0].strip() for m in modules]


def in_tree(repo: Path, module: str) -> bool:
    """Whether ``module`` is the submission's own code (a file of the tree, at its root or under src/)."""
    return _module_file(Path(repo), module) is not None


def _module_file(repo: Path, module: str) -> Path | None:
    if not re.fullmatch(r"[A-Za-z_][\w.]*", module):
        return None
    rel = Path(*module.split("."))
    for base in (repo, repo / "src"):
        for candidate in (base / rel.with_suffix(".py"), base / rel / "__init__.py"):
            if candidate.is_file() and not candidate.is_symlink():
                return candidate
    return None


def _declared_plugins(tree: ast.AST) -> list[str]:
    """Module names in a conftest's ``pytest_plugins = ...``."""
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
        ):
            for const in ast.walk(node.value):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    out.append(const.value)
    return out


# --- the AST rules ----------------------------------------------------------------------------------------


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    return ".".join(reversed(parts))


def _calls(node: ast.AST) -> Iterator[tuple[ast.Call, str]]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            yield sub, _dotted(sub.func)


def _mentions_skip(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        name = sub.attr if isinstance(sub, ast.Attribute) else sub.id if isinstance(sub, ast.Name) else ""
        if name in _SKIP_CALLS:
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value in _SKIP_CALLS:
            return True
    return False


def _modifyitems_why(func: ast.AST) -> str | None:
    for call, name in _calls(func):
        last = name.rsplit(".", 1)[-1]
        if last == "add_marker" and _mentions_skip(call):
            return "adds skip/xfail marks to collected tests"
        if last == "pytest_deselected":
            return "deselects collected tests"
        if last in ("remove", "pop", "clear") and name.split(".", 1)[0] == "items":
            return "drops collected tests"
    for sub in ast.walk(func):
        if isinstance(sub, (ast.Assign, ast.AugAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and _dotted(target.value) == "items":
                    return "replaces the list of collected tests"
        if isinstance(sub, ast.Delete) and any("items" in _dotted(t) for t in sub.targets):
            return "drops collected tests"
    return None


def _assigned(node: ast.AST) -> list[ast.AST]:
    """What an assignment statement (plain, augmented or annotated) assigns to; nothing for other nodes."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _assigns_attr(func: ast.AST, attrs: set[str]) -> int | None:
    for sub in ast.walk(func):
        for target in _assigned(sub):
            if isinstance(target, ast.Attribute) and target.attr in attrs and isinstance(sub, ast.stmt):
                return sub.lineno
        if isinstance(sub, ast.Call) and _dotted(sub.func) == "setattr" and len(sub.args) >= 2:
            name = sub.args[1]
            if isinstance(name, ast.Constant) and name.value in attrs:
                return sub.lineno
    return None


def _exits(func: ast.AST) -> int | None:
    for call, name in _calls(func):
        if name in ("os._exit", "_exit", "sys.exit", "os.kill", "pytest.exit"):
            return call.lineno
    return None


def _hook_rules(rel: str, tree: ast.AST) -> Iterator[Hook]:
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        name, where = node.name, f"{rel}:{node.lineno}"
        if name in _ALWAYS:
            yield Hook(name, where, _ALWAYS[name])
        elif name == "pytest_collection_modifyitems":
            why = _modifyitems_why(node)
            if why:
                yield Hook(name, where, why)
        elif name in ("pytest_runtest_setup", "pytest_runtest_teardown", "pytest_collection_finish"):
            if any(n.rsplit(".", 1)[-1] in _SKIP_CALLS for _, n in _calls(node)):
                yield Hook(name, where, "skips or xfails tests from a hook")
        elif name == "pytest_runtest_logreport":
            line = _assigns_attr(node, {"outcome", "longrepr", "when", "wasxfail"})
            if line:
                yield Hook(name, f"{rel}:{line}", "rewrites the report as it is logged")
        elif name in ("pytest_sessionfinish", "pytest_unconfigure", "pytest_terminal_summary"):
            line = _assigns_attr(node, {"exitstatus", "testsfailed"}) or _exits(node)
            if line:
                yield Hook(name, f"{rel}:{line}", "changes the exit status or ends the process")
        if name.startswith("pytest_") and name not in _ALWAYS:
            line = _assigns_attr(node, {"obj", "_obj", "runtest"})
            if line:
                yield Hook(name, f"{rel}:{line}", "replaces the test function or its runner")
    line = _assigns_attr(tree, {"outcome", "wasxfail"})
    if line:
        yield Hook("pytest_report_outcome", f"{rel}:{line}", "assigns a report outcome")


def _internal_aliases(tree: ast.AST) -> set[str]:
    """Local names bound to pytest internals by imports (``from _pytest.reports import TestReport``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] in ("_pytest", "pytest")
        ):
            for alias in node.names:
                if node.module.startswith("_pytest") or alias.name in _PYTEST_INTERNALS:
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "_pytest":
                    names.add((alias.asname or alias.name).split(".")[0])
    return names


# Every name `_monkeypatch_rules` can fire on appears in the source as written: an ASCII file naming none of
# these has nothing for it, and its two walks over the tree are most of the scan's time. (A non-ASCII file
# is always walked: Python folds identifiers by NFKC, so "ＴestReport" is TestReport.)
_INTERNALS_NEEDLES = ("_pytest", *sorted(_PYTEST_INTERNALS))


def _may_patch_internals(text: str) -> bool:
    return not text.isascii() or any(needle in text for needle in _INTERNALS_NEEDLES)


def _monkeypatch_rules(rel: str, tree: ast.AST) -> Iterator[Hook]:
    aliases = _internal_aliases(tree) | {"_pytest"}
    for node in ast.walk(tree):
        targets = _assigned(node)
        if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] == "setattr" and node.args:
            targets = [ast.Attribute(value=node.args[0], attr="?")]
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            chain = _dotted(target)
            parts = chain.split(".")
            if parts[0] in aliases or any(
                p in ("TestReport", "CallInfo", "CollectReport") for p in parts[:-1]
            ):
                line = node.lineno if isinstance(node, (ast.stmt, ast.expr)) else 0
                yield Hook("monkeypatch", f"{rel}:{line}", f"patches pytest internals ({chain})")
                break


# Ways code tells a sandboxed (graded) run from an ordinary one (red-team F6: a fallback that stays loud only
# when the uid is the sandbox's). Listed with file:line so the reviewer reads what changes under the grader.
_ID_CALLS = {"getuid", "geteuid", "getgid", "getegid", "getresuid"}
_SANDBOX_TELLS = ("/proc/self/mountinfo", "/proc/1/", "bwrap", "bubblewrap")
_FINGERPRINT_WHY = "can tell a graded (sandboxed) run from an ordinary one"
# Ways code tells a probe's call from a test's (red-team R5, R5b: answers invented only under pytest, or
# only unless the call came through the package's __main__): its caller's stack, whether pytest runs it.
_STACK_CALLS = {
    "sys._getframe", "inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.trace",
    "traceback.extract_stack", "traceback.walk_stack", "traceback.format_stack",
}  # fmt: skip
_PYTEST_TELLS = ("PYTEST_CURRENT_TEST", "PYTEST_VERSION")
_CALLER_WHY = "can answer a probe's call differently from a test's"


def _fingerprint_rules(rel: str, tree: ast.AST) -> Iterator[Hook]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                for call, name in _calls(side):
                    if name.rsplit(".", 1)[-1] in _ID_CALLS:
                        why = f"compares {name}(): {_FINGERPRINT_WHY}"
                        yield Hook("fingerprint", f"{rel}:{call.lineno}", why)
                        break
            if (
                isinstance(node.left, ast.Constant)
                and node.left.value in ("pytest", "_pytest")
                and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                and any(_dotted(c) == "sys.modules" for c in node.comparators)
            ):
                why = f"asks whether pytest is running: {_CALLER_WHY}"
                yield Hook("fingerprint", f"{rel}:{node.lineno}", why)
        elif isinstance(node, ast.Call) and _dotted(node.func) in _STACK_CALLS:
            why = f"reads its caller's stack ({_dotted(node.func)}): {_CALLER_WHY}"
            yield Hook("fingerprint", f"{rel}:{node.lineno}", why)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            tell = next((t for t in _SANDBOX_TELLS if t in node.value), None)
            if tell:
                yield Hook("fingerprint", f"{rel}:{node.lineno}", f"reads {tell}: {_FINGERPRINT_WHY}")
            elif node.value in _PYTEST_TELLS:
                why = f"reads {node.value}, whether pytest is running: {_CALLER_WHY}"
                yield Hook("fingerprint", f"{rel}:{node.lineno}", why)


_HIDES_WHY = "keeps tests out of collection, where neither a skip nor a deselection shows them"


def _collection_rules(rel: str, tree: ast.AST, conftest: bool) -> Iterator[Hook]:
    """Red-team R12: `collect_ignore` and `pytest_ignore_collect` in a conftest, `__test__ = False` on a
    test. Listed for the reviewer; the whole-suite run cannot undo them."""
    for node in ast.walk(tree):
        if conftest and isinstance(node, ast.FunctionDef) and node.name == "pytest_ignore_collect":
            yield Hook("collection", f"{rel}:{node.lineno}", f"pytest_ignore_collect {_HIDES_WHY}")
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = _dotted(target).rsplit(".", 1)[-1]
            if conftest and name in ("collect_ignore", "collect_ignore_glob"):
                yield Hook("collection", f"{rel}:{node.lineno}", f"{name} {_HIDES_WHY}")
            elif name == "__test__" and isinstance(node.value, ast.Constant) and node.value.value is False:
                yield Hook("collection", f"{rel}:{node.lineno}", f"__test__ = False {_HIDES_WHY}")


def _shadowed_tests(rel: str, found: list[unshadow.Shadow]) -> Iterator[Hook]:
    """Red team 20, F1: a test deleted (``del test_x``), rebound, or given a second definition under its name
    in the same module or class is gone before pytest collects. Listed, with where the test was defined;
    the whole-suite run brings it back (grader/unshadow.py), a wrapper's rebinding excepted."""
    for shadow in found:
        yield Hook("collection", f"{rel}:{shadow.line}", f"{shadow.describe()}; it {_HIDES_WHY}")


def _grader_references(rel: str, text: str) -> Iterator[Hook]:
    for lineno, line in enumerate(text.splitlines(), 1):
        match = _GRADER_NAMES.search(line)
        if match:
            yield Hook("grader-reference", f"{rel}:{lineno}", f"names the grader's {match.group(1)}")


def _config_rules(repo: Path) -> Iterator[Hook]:
    for name in _CONFIG_FILES:
        text = _read(repo / name)
        if not text:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            match = _CONFIG_TAMPER.search(line) or _GRADER_NAMES.search(line)
            if match:
                yield Hook(
                    "config", f"{name}:{lineno}", f"{match.group(1).strip()} overrides the grader's options"
                )


# --- entry point ------------------------------------------------------------------------------------------


def _parse(text: str, path: Path) -> ast.AST | None:
    try:
        return pysource.parse(text, filename=str(path))
    except (SyntaxError, ValueError):
        return None


def scan(repo: Path) -> TamperScan:
    """Every outcome-changing hook, pytest monkeypatch and grader-option override in ``repo`` (static)."""
    repo = Path(repo)
    result = TamperScan()
    plugins: set[Path] = set()
    makefile = "\n".join(_read(repo / name) or "" for name in ("GNUmakefile", "makefile", "Makefile"))
    tokens = re.findall(r"-p\s*([A-Za-z_][\w.]*)", f"{_ini_addopts(repo)}\n{makefile}")
    # PYTEST_PLUGINS=a,b on a recipe line or exported (red team 9): pytest imports those modules as plugins.
    for names in _PYTEST_PLUGINS_VAR.findall(makefile):
        tokens += [name for name in re.split(r"[,\s]+", names) if name]
    for token in [*tokens, *_entry_point_plugins(repo)]:
        found = _module_file(repo, token)
        if found:
            plugins.add(found)
    parsed: list[tuple[Path, str, ast.AST]] = []
    unreadable: list[Path] = []
    for path in _python_files(repo):
        text = _read(path)
        if text is None:
            continue
        result.files_scanned += 1
        tree = _parse(text, path)
        if tree is None:
            unreadable.append(path)
            continue
        parsed.append((path, text, tree))
        if path.name == "conftest.py":
            plugins.add(path)
            for module in _declared_plugins(tree):
                found = _module_file(repo, module)
                if found:
                    plugins.add(found)
    seen: set[tuple[str, str]] = set()

    def add(hook: Hook) -> None:
        if (hook.kind, hook.location) not in seen:
            seen.add((hook.kind, hook.location))
            result.hooks.append(hook)

    roots = _testpaths(repo)
    for path, text, tree in parsed:
        rel = _rel(repo, path)
        if path.name in _STARTUP_MODULES:
            add(Hook("startup", f"{rel}:1", _STARTUP_WHY))
        if path in plugins:
            for hook in _hook_rules(rel, tree):
                add(hook)
        for hook in _monkeypatch_rules(rel, tree) if _may_patch_internals(text) else ():
            add(hook)
        for hook in _grader_references(rel, text):
            add(hook)
        for hook in _fingerprint_rules(rel, tree):
            add(hook)
        for hook in _collection_rules(rel, tree, path.name == "conftest.py"):
            add(hook)
        if is_test_module(path.name) and (folder := _unentered_folder(Path(rel), roots)) is not None:
            why = f"lies in {folder}/, a folder pytest does not enter by default, and {_HIDES_WHY}"
            add(Hook("collection", f"{rel}:1", why))
            if folder not in result.unentered:
                result.unentered.append(folder)
        spelled = unshadow.ascii_skeleton(path.name)
        if spelled != path.name and is_test_module(spelled) and not is_test_module(path.name):
            why = f"is named with look-alike letters for {spelled!r} and {_HIDES_WHY}"
            add(Hook("collection", f"{rel}:1", why))
            result.look_alike_files.append(rel)
        if is_test_module(spelled) and (hiding := unshadow.shadows(tree)):
            for hook in _shadowed_tests(rel, hiding):
                add(hook)
            if any(not s.wraps for s in hiding):
                result.shadowed.append(rel)
    for path in unreadable:
        # Python may import what the grader cannot parse (nesting the interpreter compiles but ast.parse
        # cannot build): a hook hidden there must not pass as "no hook", so it counts as one.
        if path.name == "conftest.py" or path in plugins or path.name in _STARTUP_MODULES:
            add(Hook("unreadable", f"{_rel(repo, path)}:1", _UNREADABLE_WHY))
    for folder, first in _env_folders(repo, roots):
        if any(folder == seen or folder.startswith(f"{seen}/") for seen in result.unentered):
            continue
        why = f"lies in {folder}/, a folder pytest skips as an environment, and {_HIDES_WHY}"
        add(Hook("collection", f"{first}:1", why))
        result.unentered.append(folder)
    for hook in _config_rules(repo):
        add(hook)
    for hook in _shadow_hooks(repo):
        add(hook)
    return result


@dataclass(frozen=True)
class Send:
    """One request the suite's HTTP client sent while the cassette layer opened (or tried to open) files of
    the run's folder, and what the client was handed (guard: ``_watch_sends``). Paths are relative to the
    run's folder; bodies are cut at 16 KiB."""

    test: str  # "" when no test was running
    request: str
    response: str
    opened: tuple[str, ...]  # files that existed
    missing: tuple[str, ...]  # paths tried that did not
    site: str  # file:line of the first open, in the submission's code


@dataclass
class GuardLog:
    """What the guard plugin recorded: per-test final outcomes, and the reports whose outcome was changed."""

    outcomes: dict[str, str] = field(
        default_factory=dict
    )  # nodeid -> passed|failed|error|skipped|xfailed|...
    rewritten: list[str] = field(default_factory=list)  # "nodeid: raised <exc>, reported passed"
    notrun: list[str] = field(default_factory=list)  # nodeids of xfail(run=False) tests
    skipped: dict[str, str] = field(default_factory=dict)  # nodeid -> skip reason
    exitstatus: int | None = None  # None: pytest's session never finished
    deselected: int = 0
    # What the suite's own code changed of what the command line asked pytest to collect (its arguments,
    # --ignore, --ignore-glob), e.g. "--ignore"; empty when nothing was
    narrowed: str = ""
    collected: int | None = None  # tests the finished session had collected (after deselection)
    optimized: int = 0  # the interpreter's -O level: above 0, assert statements were compiled out
    records: int = 0
    messages: dict[str, str] = field(default_factory=dict)  # nodeid -> first line of its failure
    foreign: int = 0  # lines without the run's nonce: written to the descriptor by the suite, not the guard
    # tests whose function (or runner) the submission's code replaced after collection ("nodeid: what, by")
    wrapped: list[str] = field(default_factory=list)
    # vcrpy cassettes the suite closed: absolute path -> (interactions in the file, indexes ever played)
    vcr_plays: dict[str, tuple[int, set[int]]] = field(default_factory=dict)
    sends: list[Send] = field(default_factory=list)
    # tests whose check failed after their call ended (a thread left running, an asyncio task nothing
    # awaited): nodeid -> what the guard said; each is an error in ``outcomes``, which pytest never reported
    late: dict[str, str] = field(default_factory=dict)
    before_late: dict[str, str] = field(default_factory=dict)  # those tests' outcomes from pytest's reports

    def count(self, outcome: str, *, late: bool = True) -> int:
        """Tests with this outcome; ``late=False``: as pytest's own reports had them (see ``late``)."""
        values = self.outcomes if late else {**self.outcomes, **self.before_late}
        return sum(1 for value in values.values() if value == outcome)


_RANK = {"passed": 0, "xpassed": 1, "skipped": 2, "xfailed": 3, "failed": 4, "error": 5}


def read_guard(path: Path, nonce: str = "") -> GuardLog:
    """Parse the guard's JSONL; the worst phase outcome wins per test.

    Malformed lines are skipped; lines without this run's ``nonce`` were not written by the guard (something
    in the suite wrote to the inherited descriptor) and are listed in ``foreign``.
    """

    log = GuardLog()
    try:
        raw = read_bytes(path, cap=_GUARD_CAP)
    except UnsafeFile as exc:
        if exc.errno != errno.EFBIG:
            return log
        # Flooded through the inherited descriptor: the guard never writes that much.
        raw = read_bytes(path, cap=_GUARD_CAP, truncate=True)
        log.foreign += 1
    except OSError:
        return log
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if nonce and rec.get("n") != nonce:
            log.foreign += 1
            continue
        log.records += 1
        if "vcr" in rec:
            _add_vcr_play(log, rec)
            continue
        if "send" in rec:
            _add_send(log, rec)
            continue
        if "wrapped" in rec:
            line = f"{rec['wrapped']}: {rec.get('what', 'test function')} replaced by {rec.get('by', '?')}"
            line += f" ({rec.get('name', '?')})"
            if line not in log.wrapped:
                log.wrapped.append(line)
            continue
        if rec.get("session") is True:
            status = rec.get("exitstatus")
            log.exitstatus = status if isinstance(status, int) else None
            deselected = rec.get("deselected")
            log.deselected = deselected if isinstance(deselected, int) else 0
            narrowed = rec.get("narrowed")
            log.narrowed = narrowed[:200] if isinstance(narrowed, str) else ""
            collected = rec.get("collected")
            log.collected = collected if isinstance(collected, int) and collected >= 0 else None
            optimized = rec.get("optimized")
            log.optimized = optimized if isinstance(optimized, int) and optimized > 0 else 0
            continue
        nodeid, when = str(rec.get("nodeid", "?")), rec.get("when")
        if rec.get("late") is True:
            log.late.setdefault(nodeid, f"{rec.get('location', '?')}: {str(rec.get('longrepr', ''))[:200]}")
            continue
        outcome, raw_outcome = rec.get("outcome"), rec.get("raw")
        xfail = bool(rec.get("wasxfail"))
        if outcome == "passed":
            value = "xpassed" if xfail else ("passed" if when == "call" else None)
        elif outcome == "skipped":
            value = "xfailed" if xfail else "skipped"
            if rec.get("notrun") and nodeid not in log.notrun:
                log.notrun.append(nodeid)
            elif not xfail and not rec.get("notrun"):
                log.skipped.setdefault(nodeid, str(rec.get("longrepr", ""))[:120])
        else:
            value = "failed" if when == "call" else "error"
        if raw_outcome == "failed" and outcome in ("passed", "skipped") and not xfail:
            why = str(rec.get("raw_message", ""))[:160]
            log.rewritten.append(f"{nodeid}: raised {why or 'an exception'}, reported {outcome}")
            value = "failed" if when == "call" else "error"  # the runner's view wins over the report
        if value is None:
            continue
        if value in ("failed", "error") and nodeid not in log.messages:
            log.messages[nodeid] = f"{rec.get('location', '?')}: {str(rec.get('longrepr', ''))[:200]}"
        previous = log.outcomes.get(nodeid)
        if previous is None or _RANK[value] > _RANK[previous]:
            log.outcomes[nodeid] = value
    for nodeid, said in log.late.items():
        previous = log.outcomes.get(nodeid)
        if previous is not None and _RANK[previous] < _RANK["error"]:
            log.before_late[nodeid] = previous
            log.outcomes[nodeid] = "error"
            log.messages.setdefault(nodeid, said)
    return log


def _add_send(log: GuardLog, rec: dict[str, Any]) -> None:
    def paths(key: str) -> tuple[str, ...]:
        value = rec.get(key)
        return tuple(str(p)[:300] for p in value[:20]) if isinstance(value, list) else ()

    log.sends.append(
        Send(
            test=str(rec.get("send") or "")[:500],
            request=str(rec.get("request") or ""),
            response=str(rec.get("response") or ""),
            opened=paths("opened"),
            missing=paths("missing"),
            site=str(rec.get("site") or "?")[:300],
        )
    )


def _add_vcr_play(log: GuardLog, rec: dict[str, Any]) -> None:
    """One closing of a cassette; a cassette used by several tests is loaded afresh each time (same file)."""
    path, total, played = rec.get("vcr"), rec.get("interactions"), rec.get("played")
    if not isinstance(path, str) or not isinstance(total, int) or not isinstance(played, list):
        return
    _, before = log.vcr_plays.get(path, (total, set()))
    log.vcr_plays[path] = (total, before | {i for i in played if isinstance(i, int) and 0 <= i < total})


def write_guard(folder: Path) -> Path:
    """Write the guard plugin into ``folder`` (grader-owned, read-only to the sandbox); returns the file.

    The folder also gets the grader's ``sitecustomize.py`` (it goes first on ``PYTHONPATH``: the submission's
    own start-up modules never run) and ``CLEAN_LAUNCHER``, the clean-interpreter pytest entry point.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for source, name in (
        (_GUARD_FILE, f"{GUARD_MODULE}.py"),
        (_STARTUP_FILE, "sitecustomize.py"),
        (_CLEAN_FILE, CLEAN_LAUNCHER),
        (_RESULTS_FILE, f"{RESULTS_MODULE}.py"),
        (_LONGREPR_FILE, f"{_LONGREPR_MODULE}.py"),
    ):
        shutil.copyfile(source, folder / name)
        (folder / name).chmod(0o644)
    folder.chmod(0o755)
    return folder / f"{GUARD_MODULE}.py"
