"""Test functions wrapped by the suite's own hooks so that their assertions are swallowed (issue 14, red-team
finding 2: a `pytest_itemcollected` hook scored full marks on a red suite).

Whatever hook does the wrapping and wherever it lives (a conftest file, a plugin module the pytest
configuration names, a plugin the Makefile's command line names, an autouse fixture), the guard sees the
function pytest is about to call is not the one the test module defined, and the grader reruns the suite
without the submission's hooks: a test that passed with them and fails without them makes the run forged.
Each case is a real submission graded by the real `grader.grading.grade`; the controls are the same suite
without the hook (an honest red run) and a hook that wraps without swallowing (an honest green run).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

TESTS = """
import pytest


@pytest.mark.parametrize("i", range(4))
def test_must_hold(i):
    assert i < 0, "real failure"


def test_fine():
    assert True
"""

TOLERANT = """
import functools


def _tolerant(fn):
    @functools.wraps(fn)
    def inner(*a, **k):
        try:
            return fn(*a, **k)
        except AssertionError:
            return None

    return inner
"""

ITEMCOLLECTED = (
    TOLERANT
    + """

def pytest_itemcollected(item):
    if hasattr(item, "obj"):
        item.obj = _tolerant(item.obj)
"""
)

MODIFYITEMS = (
    TOLERANT
    + """

def pytest_collection_modifyitems(items):
    for item in items:
        item.obj = _tolerant(item.obj)
"""
)

RUNTEST_SETUP = """
def pytest_runtest_setup(item):
    original = item.runtest

    def runtest():
        try:
            original()
        except AssertionError:
            pass

    item.runtest = runtest
"""

AUTOUSE_FIXTURE = (
    TOLERANT
    + """
import pytest


@pytest.fixture(autouse=True)
def _soften(request):
    request.node.obj = _tolerant(request.node.obj)
    yield
"""
)

HONEST_WRAPPER = """
import functools
import time


def _timed(fn):
    @functools.wraps(fn)
    def inner(*a, **k):
        start = time.monotonic()
        try:
            return fn(*a, **k)
        finally:
            inner.seconds = time.monotonic() - start

    return inner


def pytest_itemcollected(item):
    item.obj = _timed(item.obj)
"""

# Red-team F3: a wrapper of pytest_runtest_call registered under a computed name from pytest_configure: no
# hook name, no pytest internals, no grader name in the source for the static scan to find.
REGISTERED_CALL_WRAPPER = """
import pytest


class _Tolerance:
    pass


def _tolerant(item):
    try:
        return (yield)
    except AssertionError:
        return None


_NAME = "_".join(["pytest", "runtest", "call"])
setattr(_Tolerance, _NAME, staticmethod(pytest.hookimpl(wrapper=True)(_tolerant)))


def pytest_configure(config):
    config.pluginmanager.register(_Tolerance(), "tolerance")
"""

# Red-team F3b: the same wrapper, plainly written in a test module and registered by the first test.
TEST_REGISTERS_WRAPPER = """
import pytest


class LabelNoise:
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        try:
            return (yield)
        except AssertionError:
            return None


def test_settings_loaded(request):
    request.config.pluginmanager.register(LabelNoise(), "label-noise")
"""

# Red-team F15: a detected hook, and a suite that hangs only where the hook's conftest is not loaded.
HANGS_WITHOUT_CONFTEST = (
    ITEMCOLLECTED
    + """
import os

os.environ["SUITE_CONFIGURED"] = "1"
"""
)
WAITS_FOR_CONFTEST = (
    """
import os
import time

if not os.environ.get("SUITE_CONFIGURED"):
    time.sleep(100000)  # "wait for the fixture server"
"""
    + TESTS
)

# Red-team F15b: skipped tests that hang, rather than fail, when they are run.
SKIPPED_AND_HANGING = """
import time

import pytest


UNDER_REVIEW = pytest.mark.skip(reason="label under review")


@pytest.mark.parametrize("i", [pytest.param(i, marks=UNDER_REVIEW) for i in range(3)])
def test_label(i):
    while i >= 0:  # "poll until the label store catches up"
        time.sleep(1)


def test_fine():
    assert True
"""

PYPROJECT_WITH_PLUGIN = """
[project]
name = "submission"
version = "0.1.0"
dependencies = []

[tool.pytest.ini_options]
addopts = "-p softplug"
"""


def _grade(repo, cache, timeout: float = 120):
    from grader.grading import grade
    from grader.rubric import load_rubric

    return grade(str(repo), rubric=load_rubric(), timeout=timeout, cache_root=cache, jobs=1)


def _replay_row(report):
    return next(row for row in report["rows"] if row["id"] == "offline-replay")


# The project registers its own plugin (a pytest11 entry point into its tree), installed with it (R8).
PYPROJECT_WITH_ENTRY_POINT = """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "submission"
version = "0.1.0"

[project.entry-points.pytest11]
soft = "softpkg.plug"

[tool.setuptools]
packages = ["softpkg"]
"""

# Red team 9: pytest asks pytest_pyfunc_call to call the test function; a plugin whose implementation calls it
# and swallows the assertion answers first. Named by PYTEST_PLUGINS on the Makefile's recipe line, which no
# configuration file names (spelled out, or through a make variable no static reading resolves).
PYFUNC_SWALLOW = """
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    names = pyfuncitem._fixtureinfo.argnames
    try:
        pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names})
    except AssertionError:
        pass
    return True
"""

# The same implementation on an object a test registers (red team 9, 2b): no conftest, no Makefile, no config.
TEST_REGISTERS_PYFUNC = """
import pytest


class _Quiet:
    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        names = pyfuncitem._fixtureinfo.argnames
        try:
            pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names})
        except AssertionError:
            pass
        return True


def test_setup(request):
    request.config.pluginmanager.register(_Quiet(), "quiet-output")
"""

# Red team 23, F3: the same implementation in a conftest file whose fixture the failing tests take: without
# conftest files they error (no evidence), so they are rerun with the fixtures kept and the hooks taken away.
FIXTURE_TESTS = """
import pytest


@pytest.mark.parametrize("i", range(4))
def test_must_hold(i, labelled):
    assert labelled[i] == "shipping", "real failure"


def test_fine(labelled):
    assert labelled
"""
FIXTURE = """

@pytest.fixture
def labelled():
    return ["refund"] * 4
"""
# The control: a conftest fixture and a pytest_pyfunc_call that calls the test without swallowing anything.
HONEST_PYFUNC = """
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    names = pyfuncitem._fixtureinfo.argnames
    pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names})
    return True
"""

CASES = {
    "conftest-fixture-pyfunc-call": (
        {"tests/conftest.py": PYFUNC_SWALLOW + FIXTURE, "tests/test_strict.py": FIXTURE_TESTS},
        None,
        "their fixtures kept, their hooks taken away before the call",
    ),
    "conftest-itemcollected": ({"tests/conftest.py": ITEMCOLLECTED}, None, "failed without them"),
    "ini-plugin-modifyitems": ({"softplug.py": MODIFYITEMS}, PYPROJECT_WITH_PLUGIN, "failed without them"),
    "makefile-plugin-runtest": (
        {"mkplug.py": RUNTEST_SETUP, "Makefile": "test:\n\tpython -m pytest -p mkplug\n"},
        None,
        "failed without them",
    ),
    "conftest-autouse-fixture": ({"tests/conftest.py": AUTOUSE_FIXTURE}, None, "failed without them"),
    "project-entry-point-plugin": (
        {"softpkg/__init__.py": "", "softpkg/plug.py": MODIFYITEMS},
        PYPROJECT_WITH_ENTRY_POINT,
        "failed without them",
    ),
    "test-registers-call-wrapper": (
        {"tests/test_000_setup.py": TEST_REGISTERS_WRAPPER},
        None,
        "swallowed by a pytest_runtest_call wrapper",
    ),
    "makefile-env-plugin-pyfunc-call": (
        {"envplug.py": PYFUNC_SWALLOW, "Makefile": "test:\n\tPYTEST_PLUGINS=envplug python -m pytest\n"},
        None,
        "failed without them",
    ),
    "makefile-variable-env-plugin-pyfunc-call": (
        {
            "envplug.py": PYFUNC_SWALLOW,
            "Makefile": "PLUG := env$(strip plug)\ntest:\n\tPYTEST_PLUGINS=$(PLUG) python -m pytest\n",
        },
        None,
        "failed without them",
    ),
    "test-registers-pyfunc-call": (
        {"tests/test_000_setup.py": TEST_REGISTERS_PYFUNC},
        None,
        "failed without them",
    ),
    "registered-call-wrapper": (
        {"tests/conftest.py": REGISTERED_CALL_WRAPPER},
        None,
        "swallowed by a pytest_runtest_call wrapper",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_suite_wrapping_its_tests_to_swallow_failures_is_forged(
    case: str, make_submission, grade_cache
) -> None:
    files, pyproject, why = CASES[case]
    repo = make_submission({"tests/test_strict.py": TESTS} | files, pyproject=pyproject)

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["forged"] is True, (facts, _replay_row(report)["evidence"])
    row = _replay_row(report)
    assert row["score"] <= 1, row
    assert "FORGED" in row["evidence"] and "test_must_hold" in row["evidence"], row["evidence"]
    assert why in row["evidence"], row["evidence"]


def test_a_suite_that_hangs_only_without_its_hooks_is_forged(make_submission, grade_cache) -> None:
    files = {"tests/conftest.py": HANGS_WITHOUT_CONFTEST, "tests/test_strict.py": WAITS_FOR_CONFTEST}
    repo = make_submission(files)

    report = _grade(repo, grade_cache, timeout=20)

    facts = report["facts"]["replay"]
    assert facts["forged"] is True and not facts["timed_out"], facts
    row = _replay_row(report)
    assert row["score"] <= 1 and "timed out: it behaves differently" in row["evidence"], row


def test_skipped_tests_that_hang_when_run_are_hidden_failures(make_submission, grade_cache) -> None:
    repo = make_submission({"tests/test_labels.py": SKIPPED_AND_HANGING})

    report = _grade(repo, grade_cache, timeout=20)

    facts = report["facts"]["replay"]
    assert facts["hidden_failures"] == 3 and not facts["timed_out"], facts
    row = _replay_row(report)
    assert row["score"] <= 1 and "did not finish when run" in " ".join(row.get("details", [])), row


def test_the_same_suite_without_the_hook_is_an_honest_red_run(make_submission, grade_cache) -> None:
    repo = make_submission({"tests/test_strict.py": TESTS})

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["forged"] is False and facts["failed"] == 4 and facts["passed"] == 1, facts
    assert "FORGED" not in _replay_row(report)["evidence"]


def test_a_hook_that_wraps_without_swallowing_is_not_forged(make_submission, grade_cache) -> None:
    green = "def test_one():\n    assert 1 + 1 == 2\n\n\ndef test_two():\n    assert 'a' in 'abc'\n"
    repo = make_submission({"tests/test_green.py": green, "tests/conftest.py": HONEST_WRAPPER})

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["forged"] is False and facts["passed"] == 2 and facts["failed"] == 0, facts
    row = _replay_row(report)
    assert "FORGED" not in row["evidence"], row
    # The wrapping is still shown to the reviewer.
    assert any("wrapped" in line and "conftest.py" in line for line in row.get("details", [])), row


def test_a_conftest_fixture_and_a_call_hook_that_swallows_nothing_is_not_forged(
    make_submission, grade_cache
) -> None:
    green = FIXTURE_TESTS.replace('== "shipping"', '== "refund"')
    repo = make_submission({"tests/test_green.py": green, "tests/conftest.py": HONEST_PYFUNC + FIXTURE})

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["forged"] is False and facts["passed"] == 5 and facts["failed"] == 0, facts
    assert "FORGED" not in _replay_row(report)["evidence"]
