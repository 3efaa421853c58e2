"""Read a submission's `[tool.takehome]` manifest, falling back to discovery; never runs submission code."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader import pysource, walk
from grader._toml import tomllib
from grader.pytest_config import addopts_text, ini_sections, is_test_module
from grader.safeio import read_bytes

__all__ = [
    "CASSETTE_DIR_CANDIDATES",
    "Manifest",
    "SuiteCommand",
    "WholeSuite",
    "not_a_submission",
    "package_command",
    "read_manifest",
    "suite_command",
    "tests_the_run_changed",
    "whole_suite_because",
]

# Ordered: the kit's own layout first, then the layouts pytest-recording and pytest-vcr use by default
# (tests/cassettes[/<module>]/) and the one vcrpy's own documentation shows (fixtures/vcr_cassettes).
CASSETTE_DIR_CANDIDATES = (
    "cassettes",
    "tests/cassettes",
    "fixtures/cassettes",
    "tests/fixtures/cassettes",
    "fixtures/vcr_cassettes",
    "tests/fixtures/vcr_cassettes",
)
# Folder names searched for anywhere shallow when no candidate above exists.
_CASSETTE_DIR_NAMES = ("cassettes", "vcr_cassettes")

_LIST_KEYS = ("triage_command", "record_command")
_STR_KEYS = ("key_function", "api_key_env", "base_url_env", "default_model")
_KNOWN_KEYS = {"cassette_dir", *_LIST_KEYS, *_STR_KEYS}
# Folders never searched: VCS data, installed third-party code, and a folder named `env`.
_SKIP_DIRS = walk.SKIPPED | {"env"}
_MAX_SCAN_FILES = 400
_MAX_SCAN_BYTES = 512_000
_TOML_CAP = 2_000_000


@dataclass(frozen=True)
class Manifest:
    declared: bool  # [tool.takehome] present and readable
    cassette_dir: Path | None  # repo-relative; declared or discovered
    triage_command: list[str] | None
    key_function: str | None
    record_command: list[str] | None
    api_key_env: str | None
    base_url_env: str | None
    default_model: str | None  # declared, or found in the repo's config when discoverable
    cassette_dir_source: str = "none"  # "declared" | "discovered" | "none"
    notes: tuple[str, ...] = ()  # problems a reviewer should know about (malformed TOML, bad key types)


def read_manifest(repo: Path) -> Manifest:
    """Read `repo/pyproject.toml`'s `[tool.takehome]`; missing or malformed -> declared=False + a note."""
    notes: list[str] = []
    table, declared = _load_table(repo, notes)

    values: dict[str, object] = {}
    for key in sorted(set(table) - _KNOWN_KEYS):
        notes.append(f"pyproject.toml: unknown [tool.takehome] key {key!r} ignored")
    for key in _LIST_KEYS:
        values[key] = _as_argv(table.get(key), key, notes)
    for key in _STR_KEYS:
        value = table.get(key)
        if value is not None and not (isinstance(value, str) and value.strip()):
            notes.append(f"pyproject.toml: [tool.takehome] {key} must be a non-empty string; ignored")
            value = None
        values[key] = value

    cassette_dir, source = _cassette_dir(repo, table.get("cassette_dir"), notes)
    if values["triage_command"] is None:
        values["triage_command"] = package_command(repo)
    default_model = values.pop("default_model") or _discover_default_model(repo)
    return Manifest(
        declared=declared,
        cassette_dir=cassette_dir,
        default_model=default_model,  # type: ignore[arg-type]
        cassette_dir_source=source,
        notes=tuple(notes),
        **values,  # type: ignore[arg-type]
    )


def _load_table(repo: Path, notes: list[str]) -> tuple[dict[str, object], bool]:
    path = repo / "pyproject.toml"
    if not path.is_file():
        notes.append("no pyproject.toml: manifest keys fall back to discovery")
        return {}, False
    try:  # never through a link, never a FIFO, capped (grader/safeio.py)
        data = tomllib.loads(read_bytes(path, cap=_TOML_CAP, root=repo).decode("utf-8"))
    except OSError as exc:
        notes.append(f"pyproject.toml not read ({exc.strerror}); manifest keys fall back to discovery")
        return {}, False
    # TOMLDecodeError and UnicodeDecodeError are ValueErrors, as is int() past its digit limit (a 5,000-digit
    # integer, red team 11: it crashed the grade before any check); nesting bombs are RecursionErrors.
    except (ValueError, RecursionError) as exc:
        notes.append(f"pyproject.toml is not valid TOML ({exc}); manifest keys fall back to discovery")
        return {}, False
    tool = data.get("tool")
    table = tool.get("takehome") if isinstance(tool, dict) else None
    if table is None:
        notes.append("pyproject.toml has no [tool.takehome]: manifest keys fall back to discovery")
        return {}, False
    if not isinstance(table, dict):
        notes.append("pyproject.toml: tool.takehome is not a table; ignored")
        return {}, False
    return table, True


def _as_argv(value: object, key: str, notes: list[str]) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, list) and value and all(isinstance(part, str) for part in value):
        return list(value)
    notes.append(f"pyproject.toml: [tool.takehome] {key} must be a non-empty list of strings; ignored")
    return None


def _inside(repo: Path, rel: str) -> Path | None:
    """The repo-relative path for `rel` when it names a folder inside the repo (links out are refused)."""
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts:
        return None
    candidate = repo / pure
    try:
        resolved = candidate.resolve(strict=True)
        resolved.relative_to(repo.resolve())
    except (OSError, ValueError):
        return None
    return Path(pure) if resolved.is_dir() else None


def _cassette_dir(repo: Path, declared: object, notes: list[str]) -> tuple[Path | None, str]:
    if declared is not None:
        if isinstance(declared, str) and declared.strip():
            found = _inside(repo, declared.strip())
            if found is not None:
                return found, "declared"
            notes.append(
                f"pyproject.toml: [tool.takehome] cassette_dir {declared!r} is not a folder inside the repo; "
                "falling back to discovery"
            )
        else:
            notes.append("pyproject.toml: [tool.takehome] cassette_dir must be a string; ignored")
    found_all = [f for f in (_inside(repo, rel) for rel in CASSETTE_DIR_CANDIDATES) if f is not None]
    if not any(_holds_tape_files(repo / f) for f in found_all):
        # No conventional folder holds a tape: find the recordings by what the files are, wherever the
        # candidate put them (recordings/, tapes/, tests/_tapes/, fixtures/recorded/...).
        by_content = _tape_folder_by_content(repo, notes)
        if by_content is not None:
            return by_content, "discovered"
    if found_all:
        # Folders nested in the chosen one are part of it; others are not graded: say so, once.
        others = [
            f.as_posix()
            for f in found_all[1:]
            if not f.is_relative_to(found_all[0]) and _holds_files(repo / f)
        ]
        if others:
            notes.append(
                f"cassette folders found: {', '.join([found_all[0].as_posix(), *others])}; graded as tapes: "
                f"{found_all[0].as_posix()} only (declare [tool.takehome] cassette_dir to choose another)"
            )
        return found_all[0], "discovered"
    # Last resort: a folder named `cassettes` or `vcr_cassettes` anywhere shallow (e.g. src/pkg/cassettes).
    for path in sorted(_walk_dirs(repo, depth=4)):
        if path.name in _CASSETTE_DIR_NAMES:
            found = _inside(repo, path.relative_to(repo).as_posix())
            if found is not None:
                return found, "discovered"
    return None, "none"


def _holds_files(folder: Path) -> bool:
    """Any regular file below ``folder`` (links are not followed)."""
    return any(True for _ in walk.files(folder, skip=(), max_files=1))


def _walk_dirs(repo: Path, depth: int) -> list[Path]:
    return list(walk.folders(repo, depth=depth, skip=_SKIP_DIRS, hidden=False))


def _discover_default_model(repo: Path) -> str | None:
    """Best effort: `.cookiecutter.json`'s default_model, else a `DEFAULT_MODEL = "..."` assignment."""
    cookie = repo / ".cookiecutter.json"
    if cookie.is_file():
        try:
            data = json.loads(read_bytes(cookie, cap=_TOML_CAP, root=repo).decode("utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            data = None
        value = data.get("default_model") if isinstance(data, dict) else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    for path in _python_files(repo):
        found = _model_constant(path)
        if found:
            return found
    return None


def _python_files(repo: Path) -> list[Path]:
    files: list[Path] = []
    for folder in [repo, *sorted(_walk_dirs(repo, depth=3))]:
        # Tests pin models of their own; the application's default is what the reviewer wants.
        if {"tests", "test"} & set(folder.relative_to(repo).parts):
            continue
        try:
            files.extend(sorted(p for p in folder.glob("*.py") if p.is_file() and not p.is_symlink()))
        except OSError:
            continue
        if len(files) >= _MAX_SCAN_FILES:
            break
    return files[:_MAX_SCAN_FILES]


def _model_constant(path: Path) -> str | None:
    try:
        tree = pysource.parse(read_bytes(path, cap=_MAX_SCAN_BYTES).decode("utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id in {"DEFAULT_MODEL", "MODEL"}:
            found = _string_value(value)
            if found:
                return found
    return None


def _string_value(value: ast.expr | None) -> str | None:
    """A literal string, or the literal default of `os.environ.get("X", "...")` / `os.getenv("X", "...")`."""
    if isinstance(value, ast.Call) and len(value.args) == 2:
        value = value.args[1]
    if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.strip():
        return value.value.strip()
    return None


_PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "Pipfile", "poetry.lock", "uv.lock")


def not_a_submission(repo: Path, manifest: Manifest) -> str | None:
    """Why ``repo`` is not a take-home submission at all, or None when it is one.

    A submission is a Python project (a project or requirements file, or any ``.py`` file) or holds tapes.
    An empty folder or a folder of C code is refused: scoring it would award points for nothing.
    """
    if manifest.cassette_dir is not None and _holds_files(repo / manifest.cassette_dir):
        return None
    for folder in [repo, *_walk_dirs(repo, depth=4)]:
        names = [p.name for p in walk.files(folder, skip=(), depth=0)]
        if any(n.endswith(".py") or n in _PROJECT_FILES or n.startswith("requirements") for n in names):
            return None
    return (
        "not a submission: no Python project (no .py file, pyproject.toml, setup.py or requirements file) "
        "and no tapes; point grade at the candidate's repository"
    )


_MAX_SNIFF_FILES = 2000
_MAX_SNIFF_BYTES = 4 * 1024 * 1024


def _tape_name(name: str) -> bool:
    from grader.tapes import TAPE_SUFFIXES  # grader.tapes imports this module's folder list

    return name.lower().endswith(TAPE_SUFFIXES)


def _holds_tape_files(folder: Path) -> bool:
    return any(True for _ in walk.files(folder, skip=(), include=_tape_name, links=True))


def _tape_folder_by_content(repo: Path, notes: list[str]) -> Path | None:
    """The folder holding the files that parse as recordings (any format the tape reader knows).

    Several unrelated folders: the one with the most tapes is graded and a note names the others.
    """
    from grader.tapes import sniff_tape  # grader.tapes imports this module's folder list

    counts: dict[Path, int] = {}
    seen = 0
    for folder in [repo, *sorted(_walk_dirs(repo, depth=5))]:
        for path in walk.files(folder, depth=0, include=_tape_name, links=True):
            seen += 1
            if seen > _MAX_SNIFF_FILES:
                break
            if sniff_tape(repo, path, max_bytes=_MAX_SNIFF_BYTES):
                rel = folder.relative_to(repo)
                counts[rel] = counts.get(rel, 0) + 1
    if not counts:
        return None
    folders = sorted(counts)
    common = Path(os.path.commonpath([f.as_posix() for f in folders])) if len(folders) > 1 else folders[0]
    if common != Path(".") and all(f.is_relative_to(common) for f in folders):
        return common
    best = max(folders, key=lambda f: (counts[f], -len(f.parts)))
    if best == Path("."):
        return None  # tapes loose in the repository root: no folder to withhold or prune
    others = [f.as_posix() for f in folders if f != best and not f.is_relative_to(best)]
    if others:
        notes.append(
            f"recordings found in {', '.join([best.as_posix(), *others])}; graded as tapes: "
            f"{best.as_posix()} only (declare [tool.takehome] cassette_dir to choose another)"
        )
    return best


def package_command(repo: Path) -> list[str] | None:
    """``python -m <pkg>`` when exactly one package at the repository root or in its ``src/`` has a
    ``__main__.py``.

    The take-home's brief names that command line (`python -m <pkg> "message"`, exit 2 on a miss), so it is
    the submission's contract, not a guess. A src/ layout counts: every run puts ``src/`` on the path
    (grader/context.py, `_pythonpath`), as the project's editable install would.
    """
    found = []
    src = repo / "src"
    bases = [repo] + ([src] if src.is_dir() and not src.is_symlink() else [])
    for base in bases:
        for child in walk.folders(base, depth=1, skip=walk.NOT_OWN_CODE, hidden=False):
            if not child.name.isidentifier():
                continue
            main = child / "__main__.py"
            if (child / "__init__.py").is_file() and main.is_file() and not main.is_symlink():
                found.append(child.name)
    return ["python", "-m", found[0]] if len(found) == 1 else None


# --- how the submission runs its suite ---------------------------------------------------------------------

_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_READMES = ("README.md", "README.rst", "README.txt", "README")
_MAKEFILE_CAP = 1_000_000
# Commands that make or sync an environment of their own, over the network, before running anything:
# offline in the sandbox they fail before a test runs. (first word, second word or "" for any)
_ENV_MAKERS = (
    ("uv", "run"), ("uv", "sync"), ("uv", "pip"), ("uvx", ""), ("poetry", "run"), ("poetry", "install"),
    ("pdm", "run"), ("pdm", "install"), ("pdm", "sync"), ("hatch", "run"), ("hatch", "test"),
    ("hatch", "env"), ("pipenv", "run"), ("pipenv", "install"), ("pipenv", "sync"), ("rye", "run"),
    ("rye", "sync"), ("tox", ""), ("nox", ""), ("pip", "install"), ("pip3", "install"),
    ("virtualenv", ""),
)  # fmt: skip
_VENV_PATH = re.compile(r"^(?:\./)?\.?venv/bin/|^\$[({]VENV[)}]/bin/")
_PYTEST = re.compile(r"(?:^|/)(?:py\.test|pytest)$")
_SIMPLE_ARG = re.compile(r"^[\w./:=,@+-]+$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_RECORDING = re.compile(r"record|_KEY=|_TOKEN=|snapshot-update|inline-snapshot=", re.IGNORECASE)


@dataclass(frozen=True)
class WholeSuite:
    """How to run every test the repository holds, when the suite's command may leave some out.

    A ``make test`` that names test files or ids, or ignores some (red-team F10), runs only those: the
    grader runs the rest too and counts the left-out tests that fail. Options that select by keyword or mark
    (``-k``, ``-m``) are kept: deselection is counted, not rerun (docs/security.md).
    """

    why: str  # where and how the command narrows the suite, for the evidence
    args: list[str]  # the command's own options, less the paths and the ignore/deselect options
    env: dict[str, str]  # the recipe line's plain variable assignments (TRIAGE_MODE=replay)


@dataclass(frozen=True)
class SuiteCommand:
    """The command the replay suite runs with, and the evidence line saying where it came from."""

    argv: list[str]
    how: str
    narrowed: WholeSuite | None = None  # set when the command may leave some of the repository's tests out
    # The recipe's own options and variables, for a whole-suite run the grader decides on after the run
    # (tests the run deselected or rewrote), when the command itself named no narrowing.
    plain: WholeSuite | None = None


def suite_command(repo: Path) -> SuiteCommand:
    """`_suite_command`, with the pytest configuration's own narrowing of the suite joined in."""
    suite = _suite_command(repo)
    config = _config_narrowing(repo)
    if not config:
        return suite
    narrowed = suite.narrowed or suite.plain or WholeSuite("", [], {})
    why = "; ".join(x for x in (narrowed.why, f"the pytest configuration selects tests ({config})") if x)
    whole = WholeSuite(why, [*_DEFAULT_COLLECTION, *narrowed.args], narrowed.env)
    return SuiteCommand(suite.argv, suite.how, whole, suite.plain)


def _suite_command(repo: Path) -> SuiteCommand:
    """The suite the way the submission says to run it: its Makefile's ``test`` target, else its README.

    A ``test`` recipe (or one it depends on) that makes an environment of its own (``uv run pytest``, ``uv
    sync``, ``poetry run``, ``tox``, a ``.venv/bin/pytest``) cannot work offline in the sandbox: the same
    tests run with the installed interpreter instead (``python -m pytest`` with the recipe's own pytest
    arguments when they are plain words), and the evidence says so. Read statically; nothing is run.
    """
    recipe = _test_recipe(repo)
    if recipe is not None:
        where, lines = recipe
        maker = next((line for _, line in lines if _makes_env(line)), None)
        makefile = where.split(":", 1)[0]
        narrowed, plain = _narrowing(repo, makefile, lines)
        indirect = _make_indirection(repo, makefile)
        if narrowed is None and indirect:
            # Red team 20, F2: make may run another recipe than the one read here; every test is run too.
            narrowed = WholeSuite(indirect, plain.args if plain else [], plain.env if plain else {})
        if maker is None:
            return SuiteCommand(["make", "test"], f"make test ({where})", narrowed, plain)
        args = next((a for _, line in lines if (a := _pytest_args(line)) is not None), [])
        argv = ["python", "-m", "pytest", *args]
        return SuiteCommand(
            argv,
            f"{where}: `make test` runs `{maker}`, which makes an environment over the network; ran "
            f"`{shlex.join(argv)}` with the installed interpreter instead",
            narrowed,
            plain,
        )
    readme = _readme_command(repo)
    if readme is not None:
        where, line, args = readme
        argv = ["python", "-m", "pytest", *args]
        if _makes_env(line):
            how = (
                f"{where}: the README runs `{line}`, which makes an environment over the network; ran "
                f"`{shlex.join(argv)}` with the installed interpreter instead"
            )
        else:
            how = f"{shlex.join(argv)} (the README's `{line}`, {where})"
        number = int(where.rsplit(":", 1)[1])
        return SuiteCommand(argv, how, *_narrowing(repo, where.rsplit(":", 1)[0], [(number, line)]))
    return SuiteCommand(
        ["python", "-m", "pytest"], "python -m pytest (no Makefile test target or README command)"
    )


def _words(line: str) -> list[str]:
    """The command's words, less the variable assignments (and ``env``) before it."""
    return _split_assignments(line)[1]


def _split_assignments(line: str) -> tuple[list[str], list[str]]:
    """(the variable assignments before the command, ``env``'s included; the command's words)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    assignments: list[str] = []
    while words and _ASSIGNMENT.match(words[0]):  # CASSETTE_MODE=replay uv run pytest
        assignments.append(words.pop(0))
    if words[:1] == ["env"]:
        words = words[1:]
        while words and _ASSIGNMENT.match(words[0]):
            assignments.append(words.pop(0))
    return assignments, words


def _makes_env(line: str) -> bool:
    words = _words(line)
    if not words:
        return False
    first, second = os.path.basename(words[0]), words[1] if len(words) > 1 else ""
    if _VENV_PATH.match(words[0]):
        return True
    if first.startswith("python") and words[1:3] == ["-m", "pip"] and "install" in words[3:4]:
        return True
    if first.startswith("python") and words[1:3] in (["-m", "tox"], ["-m", "nox"], ["-m", "venv"]):
        return True
    return any(first == a and (not b or second == b) for a, b in _ENV_MAKERS)


def _pytest_args(line: str) -> list[str] | None:
    """The plain arguments after ``pytest`` in ``line`` (None when it runs no pytest)."""
    rest = _after_pytest(line)
    if rest is None:
        return None
    return rest if all(_SIMPLE_ARG.match(a) for a in rest) else []


def _after_pytest(line: str) -> list[str] | None:
    """Every word after ``pytest`` in ``line`` up to the next shell operator (None: no pytest there)."""
    words = _words(line)
    for index, word in enumerate(words):
        if _PYTEST.search(word) or (word == "pytest" and words[index - 1 : index] == ["-m"]):
            rest: list[str] = []
            for arg in words[index + 1 :]:
                if arg in ("&&", "||", ";", "|"):
                    break
                rest.append(arg)
            return rest
    return None


# pytest options whose value is the next word (when not written `--opt=value`): that word is no path.
_VALUE_OPTIONS = frozenset(
    "-k -m -p -o -c -W -n -r --tb --rootdir --maxfail --confcutdir --basetemp --junitxml --junit-xml "
    "--log-level --log-cli-level --durations --import-mode --capture --color --override-ini --cov "
    "--cov-report --cov-config --record-mode --timeout --dist --numprocesses --config-file --inifile "
    "--log-file --cache-dir --ignore --ignore-glob --deselect".split()
)
# The recipe's own settings (TRIAGE_MODE=replay) reach the whole-suite run; what steers the interpreter,
# the loader or the grader's own plugins does not.
_PLAIN_VARIABLE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_SYSTEM_VARIABLE = re.compile(r"^(?:LD_|PYTHON|PYTEST|PY_|PATH$|HOME$|TMPDIR$|SHELL$|USER$|LANG$|LC_)", re.I)
# Options that leave tests out: the whole-suite run drops them (-k and -m too, red-team R12: a keyword
# deselecting the one failing test); a left-out test that fails for want of the network is not counted.
_NARROWING_OPTIONS = ("--ignore", "--ignore-glob", "--deselect", "--pyargs", "-k", "-m")
_OWN_CONFIG_OPTIONS = ("-c", "--config-file", "--inifile")


# Keys of the pytest configuration that decide which tests are collected (red-team R12): set at all, the
# whole-suite run puts pytest's defaults back. addopts counts when it selects (-k, -m, --ignore...).
_COLLECTION_KEYS = ("python_files", "python_functions", "python_classes", "norecursedirs")
_SELECTING_ADDOPTS = re.compile(
    r"(?:^|\s)(?:--ignore|--ignore-glob|--deselect)(?:[\s=]|$)"
    # -k and -m, glued to their value too (-knot_label), or last of a run of short options (-qk)
    r"|(?:^|\s)-[a-zA-Z]*[km](?:[\s=]|[^\s-])"
    # a collection key overridden from inside addopts (red team 4, F6: -o python_files=test_[a-t]*.py)
    r"|(?:^|\s)(?:-[a-zA-Z]*o|--override-ini)(?:\s*|=)['\"]?(?:python_files|python_functions|python_classes|norecursedirs)="
)
# What the whole-suite run passes to undo them: pytest's own defaults, the configuration's addopts off.
_DEFAULT_COLLECTION = [
    "-o", "addopts=",
    "-o", "python_files=test_*.py *_test.py",
    "-o", "python_functions=test*",
    "-o", "python_classes=Test*",
    "-o", "norecursedirs=*.egg .* _darcs build CVS dist node_modules venv {arch}",
]  # fmt: skip


def _config_narrowing(repo: Path) -> str:
    """Where the pytest configuration narrows what is collected ("" when it does not)."""
    found: list[str] = []
    for name, options in ini_sections(repo):
        for key in _COLLECTION_KEYS:
            if key in options:
                found.append(f"{name}: {key} = {options[key]!s}"[:120])
        shown = addopts_text(options)
        if _SELECTING_ADDOPTS.search(shown):
            found.append(f"{name}: addopts = {shown}"[:120])
    return "; ".join(found)


def tests_the_run_changed(pristine: Path, after: Path) -> list[str]:
    """Test files of ``pristine`` that ``after`` (the checkout the suite ran in) no longer holds as they were.

    A `make test` whose prerequisite deletes or rewrites failing tests before pytest starts (red team 4,
    F8) leaves pytest nothing to fail; the whole-suite run then runs them from a fresh copy. Read safely:
    a test file the run replaced with a link or a FIFO counts as changed.
    """
    changed = []
    for path in walk.files(pristine, include=is_test_module, skip=walk.SKIPPED):
        rel = path.relative_to(pristine)
        try:
            before = read_bytes(path, cap=_MAKEFILE_CAP, root=pristine)
            now = read_bytes(after / rel, cap=_MAKEFILE_CAP, root=after)
        except OSError:
            changed.append(rel.as_posix())
            continue
        if before != now:
            changed.append(rel.as_posix())
    return sorted(changed)


def whole_suite_because(narrowed: WholeSuite | None, why: str, plain: WholeSuite | None = None) -> WholeSuite:
    """``narrowed`` with one more reason to run every test the repository holds; with none, that run with
    the recipe's own options and variables (``plain``) and pytest's default collection."""
    if narrowed is None:
        base = plain or WholeSuite("", [], {})
        return WholeSuite(why, [*_DEFAULT_COLLECTION, *base.args], base.env)
    return WholeSuite("; ".join(x for x in (narrowed.why, why) if x), narrowed.args, narrowed.env)


def _narrowing(
    repo: Path, where: str, lines: list[tuple[int, str]]
) -> tuple[WholeSuite | None, WholeSuite | None]:
    """(whether the recipe's pytest may run fewer tests than the repository holds (see `WholeSuite`), its
    own options and variables for a whole-suite run decided later)."""
    found = next(((n, line) for n, line in lines if _pytest_args(line) is not None), None)
    if found is None:
        return None, None  # no pytest named: nothing to compare with (the suite's own runner)
    number, line = found
    place = f"{where}:{number}"
    env = {}
    for word in _split_assignments(line)[0]:
        name, _, value = word.partition("=")
        if (
            "$" not in value
            and "`" not in value
            and _PLAIN_VARIABLE.match(name)
            and not _SYSTEM_VARIABLE.match(name)
        ):
            env[name] = value
    rest = _after_pytest(line) or []
    if any("$" in a or "`" in a for a in rest):
        return WholeSuite(f"{place}: `{line}` (its arguments are not plain words)", [], env), None
    rest = [word for arg in rest for word in _short_options(arg)]
    kept: list[str] = []
    paths: list[str] = []
    narrowing: list[str] = []
    index = 0
    while index < len(rest):
        arg = rest[index]
        option = arg.split("=", 1)[0]
        takes_value = arg.startswith("-") and "=" not in arg and option in _VALUE_OPTIONS
        values = rest[index + 1 : index + 2] if takes_value else []
        index += 1 + len(values)
        setting = (values[0] if values else arg.split("=", 1)[-1]).strip("'\"")
        if option in _NARROWING_OPTIONS or (
            option in ("-o", "--override-ini") and setting.split("=", 1)[0].strip() in _COLLECTION_KEYS
        ):
            # -o python_functions=... on the command line selects as the configuration key would (G5).
            narrowing.append(" ".join([arg, *values]))
        elif arg.startswith("@"):
            # Red team 5, G5a: pytest (8.2+) reads more arguments from the file: unread, left out of the run.
            narrowing.append(f"{arg}, arguments read from a file")
        elif option in _OWN_CONFIG_OPTIONS:
            # G5b: a configuration file only this command reads; kept (its settings), its addopts overridden.
            narrowing.append(f"{' '.join([arg, *values])}, a configuration file of its own")
            kept += [*_DEFAULT_COLLECTION, arg, *values]
        elif arg.startswith("-"):
            kept += [arg, *values]
        elif (repo / arg.split("::", 1)[0]).exists():
            paths.append(arg)
        else:
            kept.append(arg)  # a value of an option the list above does not know
    plain = WholeSuite("", kept, env)
    if narrowing:
        return WholeSuite(f"{place}: `{line}` ({', '.join(narrowing)})", kept, env), plain
    if not paths:
        return None, plain
    named = [repo / p.split("::", 1)[0] for p in paths]
    if any("::" in p or not (repo / p).is_dir() for p in paths):
        return WholeSuite(f"{place}: `{line}` names test files or ids", kept, env), plain
    for path in walk.files(repo, include=is_test_module, hidden=False, max_files=5000):
        if not any(path.is_relative_to(folder) for folder in named):
            rel = path.relative_to(repo).as_posix()
            why = f"{place}: `{line}` leaves out {rel} (and any test outside {', '.join(paths)})"
            return WholeSuite(why, kept, env), plain
    return None, plain


def _short_options(arg: str) -> list[str]:
    """``arg`` as pytest's parser reads it: short options written together (``-qx``) and a short option glued
    to its value (``-o'python_functions=test_[!p]*'``, ``-knot_label``: red team 31) apart, the value its
    own word; anything else as it is."""
    if not arg.startswith("-") or arg.startswith("--") or len(arg) <= 2:
        return [arg]
    words: list[str] = []
    for at, letter in enumerate(arg[1:], start=1):
        option = f"-{letter}"
        if option in _VALUE_OPTIONS:
            value = arg[at + 1 :]
            return [*words, option, *([value] if value else [])]
        if not letter.isalpha():
            return [arg]  # not a run of options (a negative number, `-=`): left as written
        words.append(option)
    return words


def _read_text(repo: Path, name: str) -> str | None:
    try:  # never through a link, never a FIFO, capped
        return read_bytes(repo / name, cap=_MAKEFILE_CAP, root=repo, truncate=True).decode("utf-8", "replace")
    except OSError:
        return None


_INCLUDE = re.compile(r"^\s*-?s?include\s+\S")
_TEST_RULE = re.compile(r"^test\s*::?(?!=)")
_TEST_VARIABLE = re.compile(r"^test\s*:\s*(override\s+|export\s+)*[A-Za-z_][\w.]*\s*(::?=|:::=|\+=|\?=|!=|=)")
# Red team 22, F1: what runs a recipe line rather than what it says: make's shell and its flags, what bash
# reads first (BASH_ENV, ENV), the PATH the line's `python` is looked up on (make exports a variable that came
# from the environment with the Makefile's value), and Python's own start-up variables.
_RECIPE_ENVIRONMENT = re.compile(
    r"^\s*(?:(?:override|export|unexport|private)\s+)*"
    r"(SHELL|\.SHELLFLAGS|BASH_ENV|ENV|PATH|PYTHONPATH|PYTHONSTARTUP|PYTHONHOME|PYTHONUSERBASE"
    # make's own flags (GNU make 4.3 obeys `-n` and `-i` set there: the recipe is not run, or its failure
    # ignored; sub-makes get the rest), the makefiles a sub-make reads first, and the recipe-line prefix,
    # which makes the lines read here not the ones make runs.
    r"|MAKEFLAGS|GNUMAKEFLAGS|MFLAGS|MAKEFILES|\.RECIPEPREFIX)"
    r"\s*(?:::?=|:::=|\+=|\?=|!=|=)"
)
# `$(eval ...)` defines rules and variables from text made at parse time, which no line read here shows.
_EVAL = re.compile(r"[$][({]\s*eval\s")


def _make_indirection(repo: Path, name: str) -> str:
    """Where the Makefile lets make run another ``test`` recipe than the one `_test_recipe` reads: an
    ``include`` (the included file may redefine it, or set the variables it uses), a second ``test:`` rule
    with a recipe (make keeps the last), variables set for ``test`` alone, or a setting that changes what
    runs a recipe line (`_RECIPE_ENVIRONMENT`: its shell, PATH, bash's start-up file); "" when none."""
    text = _read_text(repo, name)
    if text is None:
        return ""
    rules = 0
    for number, line in enumerate(text.splitlines(), 1):
        if _INCLUDE.match(line):
            return f"{name}:{number}: `{line.strip()[:80]}`: the included file may change the `test` recipe"
        if _TEST_VARIABLE.match(line):
            return f"{name}:{number}: `{line.strip()[:80]}` sets variables for `test` alone"
        if (found := _RECIPE_ENVIRONMENT.match(line)) is not None:
            return f"{name}:{number}: `{line.strip()[:80]}` changes what runs the recipe ({found.group(1)})"
        if _EVAL.search(line):
            return f"{name}:{number}: `{line.strip()[:80]}`: `eval` may define the `test` recipe"
        if _TEST_RULE.match(line):
            rules += 1
            if rules > 1:
                return f"{name}:{number}: a second `test:` rule (make runs the last recipe)"
    return ""


def _test_recipe(repo: Path) -> tuple[str, list[tuple[int, str]]] | None:
    """(where ``test:`` is, its recipe lines and those of its prerequisites), or None without one."""
    for name in _MAKEFILES:
        text = _read_text(repo, name)
        if text is not None:
            break
    else:
        return None
    rules: dict[str, tuple[int, list[str], list[tuple[int, str]]]] = {}
    current: list[tuple[int, str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("\t"):
            if current is not None:
                current.append((number, line[1:].lstrip("@-+ ").strip()))
            continue
        match = re.match(r"^([A-Za-z0-9_.\-/ ]+?)\s*::?(?!=)(.*)$", line)
        if not match or "=" in match.group(1):
            if line.strip() and not line.lstrip().startswith("#"):
                current = None
            continue
        current = []
        prerequisites = match.group(2).split(";", 1)[0].split("#", 1)[0].split()
        for target in match.group(1).split():
            rules.setdefault(target, (number, prerequisites, current))
    if "test" not in rules:
        return None
    number, _, _ = rules["test"]
    lines: list[tuple[int, str]] = []
    seen: set[str] = set()
    todo = ["test"]
    while todo and len(seen) < 20:
        target = todo.pop(0)
        if target in seen or target not in rules:
            continue
        seen.add(target)
        _, prerequisites, recipe = rules[target]
        todo += prerequisites
        lines += recipe
    return f"{name}:{number}", lines


def _readme_command(repo: Path) -> tuple[str, str, list[str]] | None:
    """(README:line, the command, its pytest arguments) of the README's first command running pytest."""
    for name in _READMES:
        text = _read_text(repo, name)
        if text is None:
            continue
        fenced = False
        for number, raw in enumerate(text.splitlines(), 1):
            if raw.strip().startswith(("```", "~~~")):
                fenced = not fenced
                continue
            # Commands only: in a fenced block, after a shell prompt, or indented (rst, Markdown code).
            if not (fenced or raw.lstrip().startswith("$ ") or raw.startswith(("    ", "\t"))):
                continue
            line = raw.strip().removeprefix("$ ").strip()
            if _RECORDING.search(line):
                continue  # how to re-record (a key, --record-mode), not how to run the suite
            if len(line) > 200 or not line:
                continue
            args = _pytest_args(line)
            words = _words(line)
            first = os.path.basename(words[0]) if words else ""
            if args is None or not (_PYTEST.search(first) or first.startswith("python") or _makes_env(line)):
                continue
            return f"{name}:{number}", line, args
    return None
