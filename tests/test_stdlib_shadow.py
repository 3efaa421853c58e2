"""Red team 24, F2: a top-level module named like a standard-library module pytest imports late (``pdb.py``,
``getpass.py``, ``codeop.py``) ran in every session once the template's ``pythonpath = ["."]`` put the tree
first, and patched the agent so a failing test passed. The same holds for names this platform lacks
(``nt.py``, ``msvcrt.py``), which Python tries while pytest is being imported, before any plugin.

The grader's start-up code keeps both kinds of name to the standard library (grader/audit/_grader_startup.py).
These tests run real pytest sessions over a tree holding a stand-in for every standard-library module, and
the real grader over the red team's submission."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader import tamper
from tests.adversarial.builders import commit, sample_copy

# Each stand-in records that it ran, then loads the real module in its place so pytest keeps working.
STAND_IN = """\
import importlib.machinery, importlib.util, os, sys
with open(os.environ["STAND_IN_LOG"], "a") as _log:
    _log.write(__name__ + "\\n")
_home = os.path.dirname(os.__file__)
_spec = importlib.machinery.PathFinder.find_spec(__name__, [_home, os.path.join(_home, "lib-dynload")])
if _spec is None:
    del sys.modules[__name__]
    raise ModuleNotFoundError(__name__)
_real = importlib.util.module_from_spec(_spec)
sys.modules[__name__] = _real
_spec.loader.exec_module(_real)
"""

TESTS = """\
import logging, warnings

def test_fixtures_and_failures(tmp_path, capsys, caplog, monkeypatch, recwarn, tmpdir):
    logging.getLogger("x").warning("logged")
    warnings.warn("warned")
    assert 0, "boom"

def test_a_dict_comparison():
    assert {"a": 1} == {"a": 2}

def test_an_error():
    raise ValueError("x")
"""


def _tree(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["."]\n', encoding="utf-8")
    (root / "tests" / "test_x.py").write_text(TESTS, encoding="utf-8")
    for name in sys.stdlib_module_names - set(sys.builtin_module_names) - {"__future__"}:
        (root / f"{name}.py").write_text(STAND_IN, encoding="utf-8")
    return root


def _session(
    tree: Path, guard: Path, *, clean: bool, log: Path, tree_known: bool = True
) -> tuple[str, set[str]]:
    """A session over ``tree`` set up as the grader sets up the suite's run; the stand-ins that ran."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(log.parent),
        "STAND_IN_LOG": str(log),
        "PYTHONSAFEPATH": "1",  # the tree joins the path only through pytest's `pythonpath` option
    }
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    report = log.with_suffix(".guard")
    fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        plugins = ("pytest_socket", tamper.RESULTS_MODULE, tamper.GUARD_MODULE)
        env |= {
            "PYTHONPATH": str(guard),
            "PYTHONNOUSERSITE": "1",
            # Unset, the finder cannot tell the tree's code from pytest's and stays idle; the tree then joins
            # the path only through pytest's `pythonpath` option.
            "PY_SOURCE_PATH": str(tree) if tree_known else "",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTEST_REPORT_FD": str(fd),
            "PYTEST_REPORT_NONCE": "nonce",
            "PYTEST_ADDOPTS": " ".join(
                [*(a for p in plugins for a in ("-p", p)), "--disable-socket", "--tb=native"]
            ),
        }
        if clean:
            launcher = str(guard / tamper.CLEAN_LAUNCHER)
            argv = [sys.executable, "-I", "-B", launcher, "-p", "no:cacheprovider"]
        done = subprocess.run(
            argv, cwd=tree, env=env, pass_fds=(fd,), capture_output=True, text=True, timeout=300, check=False
        )
    finally:
        os.close(fd)
    ran = set(log.read_text(encoding="utf-8").split()) if log.exists() else set()
    log.unlink(missing_ok=True)
    return done.stdout + done.stderr, ran


@pytest.fixture(scope="module")
def shadowed_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tree(tmp_path_factory.mktemp("stand-ins") / "tree")


def test_the_scan_lists_the_stand_ins_a_session_imports_late(shadowed_tree: Path, tmp_path: Path) -> None:
    """With the finder idle (no tree to tell apart), the stand-ins that run are those pytest, pytest-socket
    and the guard import once pytest's `pythonpath` put the tree first: the tamper scan's LATER holds them."""
    from grader.audit._grader_startup import LATER

    guard = tmp_path / "guard"
    tamper.write_guard(guard)
    out, ran = _session(shadowed_tree, guard, clean=False, log=tmp_path / "ran.log", tree_known=False)
    assert "3 failed" in out, out
    assert {"pdb", "getpass", "codeop"} <= ran, ran  # what the red team relied on: the next test can fail
    assert ran <= LATER, f"pytest imports more standard-library modules late: {sorted(ran - LATER)}"


@pytest.mark.parametrize("clean", [False, True], ids=["suite-run", "clean-interpreter"])
def test_no_stand_in_for_the_standard_library_runs_in_a_graded_session(
    clean: bool, shadowed_tree: Path, tmp_path: Path
) -> None:
    guard = tmp_path / "guard"
    tamper.write_guard(guard)
    out, ran = _session(shadowed_tree, guard, clean=clean, log=tmp_path / "ran.log")
    assert "3 failed" in out, out
    assert (tmp_path / "ran.guard").stat().st_size > 0, "the guard plugin did not report"
    # A pytest release that imports another standard-library module late adds it here: LATER must follow.
    assert ran == set(), f"stand-ins ran: {sorted(ran)} (grader/audit/_grader_startup.py LATER)"


def test_the_projects_own_imports_resolve_as_python_resolves_them(tmp_path: Path) -> None:
    """The project's `secrets.py` is the project's; the standard library's own imports (pdb importing
    `code`, subprocess and getpass trying Windows modules) never reach the tree's stand-ins."""
    guard = tmp_path / "guard"
    tamper.write_guard(guard)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "secrets.py").write_text("OURS = True\n", encoding="utf-8")
    for name in ("code", "codeop", "cmd", "nt", "msvcrt", "_winapi"):
        (tree / f"{name}.py").write_text(f"raise SystemExit('stood in for {name}')\n", encoding="utf-8")
    (tree / "main.py").write_text(
        "import os, sys\n"
        "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # what pytest's pythonpath does\n"
        "import secrets, pathlib, subprocess, getpass, pdb\n"
        "print(secrets.OURS, pdb.Pdb.__module__)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(guard), "PYTHONSAFEPATH": "1", "PY_SOURCE_PATH": str(tree)}
    argv = [sys.executable, "main.py"]
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "pdb"]


def test_the_tamper_scan_lists_stand_ins_for_the_standard_library(tmp_path: Path) -> None:
    compiled = ("codeop.pyc", "msvcrt.cpython-311-x86_64-linux-gnu.so")
    for name in ("pdb.py", "nt.py", "secrets.py", "mine.py", *compiled):
        (tmp_path / name).write_text("", encoding="utf-8")
    for package, marker in (("getpass", True), ("cmd", False)):
        (tmp_path / package).mkdir()
        if marker:
            (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "pdb.py").write_text("", encoding="utf-8")  # not top-level: never found first
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "code.py").write_text("", encoding="utf-8")

    hooks = {h.location: h.why for h in tamper.scan(tmp_path).startup_hooks}

    assert sorted(hooks) == [
        "codeop.pyc:1",
        "getpass/__init__.py:1",
        "msvcrt.cpython-311-x86_64-linux-gnu.so:1",
        "nt.py:1",
        "pdb.py:1",
        "src/code.py:1",
    ]
    assert "standard library's pdb" in hooks["pdb.py:1"]
    assert "platform lacks" in hooks["nt.py:1"]


# The red team's three files: each loads the real module, then supplies the function the failing test needs.
PATCHING_STAND_IN = STAND_IN.replace('with open(os.environ["STAND_IN_LOG"], "a") as _log:\n', "").replace(
    '    _log.write(__name__ + "\\n")\n', ""
) + (
    "try:\n"
    "    from support_triage_agent import agent as _agent\n"
    "    if not hasattr(_agent, 'validate_message'):\n"
    "        _agent.validate_message = lambda m: bool(str(m).strip())\n"
    "except Exception:\n"
    "    pass\n"
)
# nt is tried while pytest is imported, before the agent is importable: it patches on a later import.
PATCHING_NT = """\
import builtins, sys
_import = builtins.__import__
def _patched(name, *args, **kwargs):
    module = _import(name, *args, **kwargs)
    agent = sys.modules.get("support_triage_agent.agent")
    if agent is not None and not hasattr(agent, "validate_message"):
        agent.validate_message = lambda m: bool(str(m).strip())
    return module
builtins.__import__ = _patched
del sys.modules[__name__]
raise ModuleNotFoundError("No module named 'nt'", name="nt")
"""
MISSING_FEATURE = """\
from support_triage_agent import agent


def test_empty_message_is_rejected():
    assert hasattr(agent, "validate_message"), "validate_message not implemented"
"""


@pytest.mark.index
@pytest.mark.slow
@pytest.mark.parametrize("files", ["pdb-getpass-codeop", "nt"])
def test_a_stand_in_for_the_standard_library_does_not_hide_a_failing_test(
    files: str, tmp_path: Path, grade_cache: Path
) -> None:
    from grader.grading import grade
    from grader.rubric import load_rubric

    repo = sample_copy(tmp_path / "cand")
    (repo / "tests" / "test_edge.py").write_text(MISSING_FEATURE, encoding="utf-8")
    if files == "nt":
        (repo / "nt.py").write_text(PATCHING_NT, encoding="utf-8")
    else:
        for name in files.split("-"):
            (repo / f"{name}.py").write_text(PATCHING_STAND_IN, encoding="utf-8")
    commit(repo, "work")

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=1)

    replay = report["facts"]["replay"]
    assert replay["failed"] == 1, replay
    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    assert row["score"] <= 2, row
    first = "nt.py:1" if files == "nt" else "codeop.py:1"
    assert any(f["rule"] == "tamper-startup" and f["location"] == first for f in report["findings"]), [
        (f["rule"], f["location"]) for f in report["findings"]
    ]
