"""The guard plugin shares pytest's parsed-source cache across failure reports: same reports, less work.

Every suite run the grader makes loads the guard (`-p _grader_guard`). A run where many tests fail through
the same modules (the loud-miss rerun with every tape withheld) must print exactly what pytest alone prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from grader import tamper

LIB = """
def call(message):
    return _send(message)


def _send(message):
    first = 1
    second = 2
    raise LookupError(f"no tape for {message}")
"""

TESTS = """
import pytest

import lib


@pytest.mark.parametrize("n", range(4))
def test_needs_a_tape(n):
    assert lib.call(n) == "answer"
"""

# The second failure happens after the test rewrote lib.py: its report must show the new source. The raise
# now spans three lines where the old file had three statements, so a stale parse would cut it short.
REWRITING_TESTS = """
import importlib
import pathlib

import lib

NEW = '''
def call(message):
    return _send(message)


def _send(message):
    raise LookupError(
        f\"no tape for {message}\"
    )
'''


def test_first():
    lib.call("first")


def test_second_after_a_rewrite():
    pathlib.Path(lib.__file__).write_text(NEW)
    importlib.reload(lib)
    lib.call("second")
"""


def _suite(root: Path, tests: str) -> Path:
    root.mkdir()
    (root / "lib.py").write_text(textwrap.dedent(LIB).lstrip(), encoding="utf-8")
    (root / "test_lib.py").write_text(textwrap.dedent(tests).lstrip(), encoding="utf-8")
    return root


def _pytest(root: Path, guard: Path | None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GRADER_"))}
    env.update(PYTHONPATH=os.pathsep.join(str(p) for p in (guard, root) if p), PYTHONDONTWRITEBYTECODE="1")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "test_lib.py"]
    if guard is not None:
        argv[3:3] = ["-p", tamper.GUARD_MODULE]
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    # Only what legitimately varies between two runs: timings, object addresses, the plugin list.
    text = re.sub(r" in [0-9.]+s", " in Xs", done.stdout)
    text = re.sub(r"0x[0-9a-f]+", "0x?", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith(("plugins:", "rootdir:")))


def test_failure_reports_are_the_same_with_the_guard(tmp_path: Path) -> None:
    guard = tamper.write_guard(tmp_path / "guard").parent
    plain = _pytest(_suite(tmp_path / "plain", TESTS), None)
    guarded = _pytest(_suite(tmp_path / "guarded", TESTS), guard)
    assert "4 failed" in plain
    assert plain.count("E       LookupError: no tape for") == 4
    assert guarded.replace("guarded", "plain") == plain


def test_a_source_file_changed_during_the_run_is_reported_as_it_is_now(tmp_path: Path) -> None:
    guard = tamper.write_guard(tmp_path / "guard").parent
    plain = _pytest(_suite(tmp_path / "plain", REWRITING_TESTS), None)
    guarded = _pytest(_suite(tmp_path / "guarded", REWRITING_TESTS), guard)
    assert "2 failed" in plain
    assert 'f"no tape for {message}"' in plain  # the second failure shows the whole new statement
    assert guarded.replace("guarded", "plain") == plain


# Frames without a file (exec'd source: pytest's own fallbacks), a lambda, and two functions of one module
# at different lines: each report must show the right lines although the module's source is built once.
MIXED_TESTS = """
import pytest

import lib

GENERATED = compile("def generated(message):\\n    raise KeyError(message)\\n", "<generated>", "exec")
namespace = {}
exec(GENERATED, namespace)

late = lambda message: lib.call(message)


@pytest.mark.parametrize("n", range(3))
def test_through_the_module(n):
    assert late(n)


def test_through_generated_code():
    namespace["generated"]("no file for this frame")


def test_the_module_directly():
    lib._send("direct")
"""


def test_reports_through_shared_and_fileless_sources_are_the_same_with_the_guard(tmp_path: Path) -> None:
    guard = tamper.write_guard(tmp_path / "guard").parent
    plain = _pytest(_suite(tmp_path / "plain", MIXED_TESTS), None)
    guarded = _pytest(_suite(tmp_path / "guarded", MIXED_TESTS), guard)
    assert "5 failed" in plain
    assert "KeyError: 'no file for this frame'" in plain
    assert plain.count("E       LookupError: no tape for") == 4
    assert guarded.replace("guarded", "plain") == plain
