"""A test whose own body never runs is failed in the grader's runs, or made to run its body.

Red team 27 (F4/F5) reported `async def` and generator test methods as passed, and a test whose `__code__`
was swapped; the guard replaced `TestCase._callTestMethod`, and a TestCase can override that method (or
`run`) itself; a fixture can swap a test's code after pytest collected it. Here pytest runs with the guard
active, as the grader's runs load it, and the guard's own records are read back: a test whose body runs
keeps its outcome (IsolatedAsyncioTestCase included), one whose body never runs fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from grader import tamper

TESTS = '''
import unittest


class Plain(unittest.TestCase):
    def test_passes(self):
        self.assertTrue(True)

    def test_fails(self):
        self.assertTrue(False)


class Awaited(unittest.IsolatedAsyncioTestCase):
    async def test_passes(self):
        self.assertTrue(True)

    async def test_fails(self):
        self.assertTrue(False)


class OwnCall(unittest.TestCase):
    """Calls the method, never awaits what it returns."""

    def _callTestMethod(self, method):
        method()

    async def test_async_fails(self):
        self.assertTrue(False)

    def test_generator_fails(self):
        self.assertTrue(False)
        yield


class OwnRun(unittest.TestCase):
    """Reports success without calling the method at all."""

    def run(self, result=None):
        result.startTest(self)
        result.addSuccess(self)
        result.stopTest(self)

    def test_fails(self):
        self.assertTrue(False)


class Expected(unittest.TestCase):
    @unittest.expectedFailure
    def test_known_bug(self):
        self.assertTrue(False)
'''


SWAPPED = """
import threading

import pytest


def test_fails():
    assert False


def test_fails_too():
    assert False


def test_passes():
    assert True


@pytest.fixture(autouse=True)
def _swap(request):
    if request.function.__name__ == "test_fails":
        request.function.__code__ = (lambda: None).__code__
    elif request.function.__name__ == "test_fails_too":
        request.function.__code__ = threading.current_thread.__code__  # a library's code, not the suite's
"""


def _guarded(tmp_path: Path, name: str, source: str) -> tamper.GuardLog:
    (tmp_path / name).write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    guard = tamper.write_guard(tmp_path / "guard").parent
    log = tmp_path / "guard.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GRADER_"))}
    with log.open("wb") as sink:
        env.update(
            PYTHONPATH=str(guard),
            PYTHONDONTWRITEBYTECODE="1",
            PYTEST_REPORT_FD=str(sink.fileno()),
            PYTEST_REPORT_NONCE="n1",
        )
        argv = [sys.executable, "-m", "pytest", "-p", tamper.GUARD_MODULE, "-p", "no:cacheprovider"]
        subprocess.run(
            [*argv, "-o", "addopts=", "-W", "ignore", name],
            cwd=tmp_path,
            env=env,
            pass_fds=(sink.fileno(),),
            capture_output=True,
            timeout=120,
        )
    return tamper.read_guard(log, nonce="n1")


def test_a_unittest_test_whose_body_never_runs_fails_and_every_other_keeps_its_outcome(
    tmp_path: Path,
) -> None:
    read = _guarded(tmp_path, "test_bodies.py", TESTS)
    outcomes, messages = read.outcomes, read.messages
    short = {nodeid.split("::", 1)[1]: outcome for nodeid, outcome in outcomes.items()}
    assert short == {
        "Plain::test_passes": "passed",
        "Plain::test_fails": "failed",
        "Awaited::test_passes": "passed",
        "Awaited::test_fails": "failed",
        "OwnCall::test_async_fails": "failed",
        "OwnCall::test_generator_fails": "failed",
        "OwnRun::test_fails": "failed",
        "Expected::test_known_bug": short.get("Expected::test_known_bug"),
    }, short
    # expectedFailure is undone in the grader's runs, so its failure shows; it was called either way.
    assert short["Expected::test_known_bug"] != "passed", short
    said = {nodeid.split("::", 1)[1]: text for nodeid, text in messages.items()}
    assert "returned a coroutine" in said["OwnCall::test_async_fails"], said
    assert "returned a generator" in said["OwnCall::test_generator_fails"], said
    assert "never called" in said["OwnRun::test_fails"], said


def test_a_test_whose_code_a_fixture_swapped_runs_its_own_body(tmp_path: Path) -> None:
    read = _guarded(tmp_path, "test_swapped.py", SWAPPED)
    short = {nodeid.split("::", 1)[1]: outcome for nodeid, outcome in read.outcomes.items()}
    assert short == {"test_fails": "failed", "test_fails_too": "failed", "test_passes": "passed"}, short
    # Listed as code the run replaced, which sends the grader to its verifying reruns.
    assert any("test_fails: test code" in line for line in read.wrapped), read.wrapped
