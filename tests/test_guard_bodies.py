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


ELSEWHERE = """
import gc
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest


def check():
    assert 1 + 1 == 3


def test_in_a_thread():
    worker = threading.Thread(target=check)
    worker.start()
    worker.join()


class _Check:
    def __del__(self):
        check()


def test_in_a_finalizer():
    _Check()
    gc.collect()


def test_in_a_pool_task_nobody_asks():
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(check)


def test_a_pool_task_asked_for_and_expected():
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(check)
    with pytest.raises(AssertionError):
        future.result()


def test_a_passing_thread():
    worker = threading.Thread(target=lambda: None)
    worker.start()
    worker.join()


def test_a_thread_of_the_tests_own_code_that_raises():
    def parse():
        int("not a number")

    worker = threading.Thread(target=parse)
    worker.start()
    worker.join()


def test_background_noise_of_a_library_is_not_a_verdict():
    import socket

    worker = threading.Thread(target=socket.create_connection, args=(("127.0.0.1", 9),))
    worker.start()
    worker.join()
"""


LATE = """
import asyncio
import threading
import time


def check():
    assert 1 + 1 == 3


def later():
    time.sleep(1.0)
    check()


def test_a_daemon_thread_that_checks_after_the_call():
    threading.Thread(target=later, daemon=True).start()


def test_a_thread_that_checks_after_the_call():
    threading.Thread(target=later).start()


def test_a_test_running_while_they_fail_passes():
    time.sleep(0.8)


async def acheck():
    check()


def test_an_asyncio_task_nothing_awaited():
    async def main():
        asyncio.get_running_loop().create_task(acheck())
        await asyncio.sleep(0)

    asyncio.run(main())


def test_an_awaited_task_whose_error_is_expected():
    async def main():
        task = asyncio.get_running_loop().create_task(acheck())
        try:
            await task
        except AssertionError:
            pass

    asyncio.run(main())
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


def test_an_assertion_that_fails_outside_the_tests_frame_fails_the_test(tmp_path: Path) -> None:
    """Red team 29, F1: the check in a worker thread (or a `__del__`, or a pool task nobody asked for)
    failed, pytest only warned and reported a pass: 52/57 against 47/57 for the twin. An error of library
    code in a background thread (a refused connection) is noise, not the test's verdict."""
    read = _guarded(tmp_path, "test_elsewhere.py", ELSEWHERE)
    short = {nodeid.split("::", 1)[1]: outcome for nodeid, outcome in read.outcomes.items()}
    assert short == {
        "test_in_a_thread": "failed",
        "test_in_a_finalizer": "failed",
        "test_in_a_pool_task_nobody_asks": "failed",
        "test_a_pool_task_asked_for_and_expected": "passed",
        "test_a_passing_thread": "passed",
        "test_a_thread_of_the_tests_own_code_that_raises": "failed",
        "test_background_noise_of_a_library_is_not_a_verdict": "passed",
    }, short
    said = {nodeid.split("::", 1)[1]: text for nodeid, text in read.messages.items()}
    assert "in a thread the test started" in said["test_in_a_thread"], said


def test_a_check_that_fails_after_the_tests_call_ended_fails_that_test(tmp_path: Path) -> None:
    """The gap red team 29's fix left: a thread still running when the call ends (daemon or not) fails
    later, an asyncio task nothing awaited fails where pytest never looks. Each is its own test's error,
    not the test that happened to run at the time."""
    read = _guarded(tmp_path, "test_late.py", LATE)
    short = {nodeid.split("::", 1)[1]: outcome for nodeid, outcome in read.outcomes.items()}
    assert short == {
        "test_a_daemon_thread_that_checks_after_the_call": "error",
        "test_a_thread_that_checks_after_the_call": "error",
        "test_a_test_running_while_they_fail_passes": "passed",
        "test_an_asyncio_task_nothing_awaited": "failed",
        "test_an_awaited_task_whose_error_is_expected": "passed",
    }, short
    said = {nodeid.split("::", 1)[1]: text for nodeid, text in read.messages.items()}
    assert "after the test's call ended" in said["test_a_daemon_thread_that_checks_after_the_call"], said
    assert "asyncio task nothing awaited" in said["test_an_asyncio_task_nothing_awaited"], said
