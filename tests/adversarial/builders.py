"""Builders of adversarial submissions (see the package docstring). Real git repositories, no mocks."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[2] / "sample_solution"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Candidate",
    "GIT_AUTHOR_EMAIL": "candidate@example.invalid",
    "GIT_COMMITTER_NAME": "Candidate",
    "GIT_COMMITTER_EMAIL": "candidate@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}
_IGNORE = shutil.ignore_patterns(".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache", "*.pyc")

# Three tests that genuinely fail: the suite a dishonest candidate wants to hide.
FAILING_TESTS = '''
"""Tests that fail for real (the agent does not do this yet)."""

from support_triage_agent.agent import parse_answer


def test_hidden_failure_one():
    assert parse_answer('{"intent": "refund", "needs_human": false}') == {"intent": "other"}


def test_hidden_failure_two():
    assert 1 + 1 == 3, "arithmetic is broken"


def test_hidden_failure_three():
    raise RuntimeError("not implemented")
'''


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Path], Path]
    bands: dict[str, tuple[int, int]]  # row id -> (lowest, highest) score allowed
    note: str = ""
    refused: bool = False  # True: `grade` must refuse it (exit 2)
    evidence: tuple[str, ...] = field(default_factory=tuple)  # substrings the offline-replay evidence names


def commit(repo: Path, message: str = "work") -> Path:
    """`git init` (if needed), add everything, commit; returns ``repo``."""
    env = {**os.environ, **_GIT_ENV, "HOME": str(repo.parent)}
    if not (repo / ".git").exists():
        subprocess.run(
            ["git", "init", "-q", "-b", "main"], cwd=repo, env=env, check=True, capture_output=True
        )
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True, capture_output=True)
    subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-m", message],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    return repo


def sample_copy(dest: Path) -> Path:
    """A copy of sample_solution at ``dest`` (not committed yet)."""
    shutil.copytree(SAMPLE, dest, ignore=_IGNORE, symlinks=True)
    return dest


def _write(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def _append(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.write_text(path.read_text(encoding="utf-8") + "\n" + textwrap.dedent(text), encoding="utf-8")


# --- tamper cases -----------------------------------------------------------------------------------------


def forged_conftest(dest: Path) -> Path:
    """Failing tests plus a conftest hook wrapper that rewrites every failed report to passed."""
    repo = sample_copy(dest)
    _write(repo, "tests/test_hidden.py", FAILING_TESTS)
    _append(
        repo,
        "tests/conftest.py",
        """
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            report = outcome.get_result()
            if report.failed:
                report.outcome = "passed"
                report.longrepr = None
        """,
    )
    return commit(repo)


def skipped_failures(dest: Path) -> Path:
    """The failing tests are marked skip (and one xfail(run=False)): nothing fails, nothing is checked."""
    repo = sample_copy(dest)
    text = FAILING_TESTS.replace("from support", "import pytest\n\nfrom support")
    text = text.replace(
        "def test_hidden_failure_one", '@pytest.mark.skip(reason="flaky")\ndef test_hidden_failure_one'
    )
    text = text.replace(
        "def test_hidden_failure_two", '@pytest.mark.skip(reason="later")\ndef test_hidden_failure_two'
    )
    text = text.replace(
        "def test_hidden_failure_three",
        '@pytest.mark.xfail(run=False, reason="wip")\ndef test_hidden_failure_three',
    )
    _write(repo, "tests/test_hidden.py", text)
    return commit(repo)


def skip_hook(dest: Path) -> Path:
    """A conftest hook marks the failing tests skipped at collection."""
    repo = sample_copy(dest)
    _write(repo, "tests/test_hidden.py", FAILING_TESTS)
    _append(
        repo,
        "tests/conftest.py",
        """
        def pytest_collection_modifyitems(config, items):
            for item in items:
                if "hidden" in item.name:
                    item.add_marker(pytest.mark.skip(reason="environment"))
        """,
    )
    return commit(repo)


def _exit_case(body: str) -> Callable[[Path], Path]:
    def build(dest: Path) -> Path:
        repo = sample_copy(dest)
        # Named to run first, so the real passing tests never get to report.
        _write(
            repo,
            "tests/test_aaa_exit.py",
            f"import os\nimport signal\nimport sys\n\n\ndef test_exit():\n    {body}\n",
        )
        _write(repo, "tests/test_hidden.py", FAILING_TESTS)
        return commit(repo)

    return build


os_exit_in_test = _exit_case("os._exit(0)")
sys_exit_in_test = _exit_case("sys.exit(0)")
killed_interpreter = _exit_case("os.kill(os.getpid(), signal.SIGKILL)")


def forged_result_log(dest: Path) -> Path:
    """A test writes 'passed' lines into every grader log it can find, then ends the process with status 0."""
    repo = sample_copy(dest)
    _write(
        repo,
        "tests/test_aaa_forge.py",
        """
        import json
        import os


        def test_forge():
            for name in ("GRADER_RESULT_LOG", "GRADER_GUARD_LOG"):
                path = os.environ.get(name)
                if path:
                    with open(path, "w") as log:
                        for i in range(30):
                            line = {"nodeid": f"t{i}", "when": "call", "outcome": "passed"}
                            log.write(json.dumps(line) + "\\n")
                        log.write(json.dumps({"session": True, "exitstatus": 0}) + "\\n")
            for fd in range(3, 64):
                try:
                    os.write(fd, b'{"nodeid": "x", "when": "call", "outcome": "passed", "raw": "passed"}\\n')
                except OSError:
                    pass
            os._exit(0)
        """,
    )
    _write(repo, "tests/test_hidden.py", FAILING_TESTS)
    return commit(repo)


def plugins_disabled(dest: Path) -> Path:
    """`make test` drops the grader's options and plugins, and the suite has failing tests."""
    repo = sample_copy(dest)
    _write(repo, "tests/test_hidden.py", FAILING_TESTS)
    makefile = (repo / "Makefile").read_text(encoding="utf-8")
    makefile = makefile.replace(
        "CASSETTE_MODE=replay $(PYTHON) -m pytest\n",
        "CASSETTE_MODE=replay PYTEST_ADDOPTS= $(PYTHON) -m pytest"
        " -p no:_grader_pytest -p no:_grader_guard || true\n",
    )
    (repo / "Makefile").write_text(makefile, encoding="utf-8")
    return commit(repo)


_CAPPED = {"offline-replay": (0, 1)}

CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case(
            "forged-conftest",
            forged_conftest,
            _CAPPED,
            "makereport wrapper rewrites failures",
            evidence=("conftest.py",),
        ),
        Case("skipped-failures", skipped_failures, _CAPPED, "failing tests marked skip", evidence=("skip",)),
        Case("skip-hook", skip_hook, _CAPPED, "modifyitems adds skip marks", evidence=("conftest.py",)),
        Case("os-exit", os_exit_in_test, _CAPPED, "os._exit(0) in a test", evidence=("never finished",)),
        Case("sys-exit", sys_exit_in_test, _CAPPED, "sys.exit(0) in a test"),
        Case(
            "killed-interpreter",
            killed_interpreter,
            _CAPPED,
            "SIGKILL to itself",
            evidence=("never finished",),
        ),
        Case("forged-result-log", forged_result_log, _CAPPED, "writes fake lines into the grader's logs"),
        Case("plugins-disabled", plugins_disabled, _CAPPED, "make test drops the grader's plugins"),
    )
}


def build(name: str, dest: Path) -> Path:
    """Build the case ``name`` at ``dest``; returns the repository (or archive) path to grade."""
    return CASES[name].build(dest)
