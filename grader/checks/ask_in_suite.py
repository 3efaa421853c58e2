"""The triage command asked about one message from inside the suite's own pytest session.

A test file added to a copy's tests folder runs ``python -m <pkg> MESSAGE`` in pytest's process (runpy),
with the whole folder collected and only that test selected, so whatever the suite sets up for its own
tests is in force: its conftest's environment variables, fixtures and plugins, what its test modules do
when imported, ``PYTEST_CURRENT_TEST``, pytest on the stack. Not in force: a fixture of one test module
(it applies to that module's tests only), and a collection hook that drops the added test (then the
command runs as it is, and says what it says outside the suite). A client that invents answers only
under pytest shows here (red-team R5); so does an agent that swaps the label it parsed, or answers a miss
from a table, only when its conftest switched that on (red team 18). The test ends the process with
``os._exit(100 + the command's exit code)``, so pytest's own exit status never stands in for the
command's. Commands of any other form run as they are.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from grader.context import Context
    from grader.sandbox import RunResult

__all__ = ["ask", "exit_code", "in_suite_argv", "is_module_command"]

_OFFSET = 100  # the test file's exit status is the command's plus this

_TEST_FILE = """\
import os
import runpy
import sys


def test_ticket():
    sys.argv = [{module!r}, {message!r}]
    code = 0
    try:
        runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit({offset} + (code if 0 <= code < {offset} else 1))
"""


def is_module_command(command: list[str]) -> bool:
    """``command`` is ``python -m <pkg>``: the only form that can be run from inside the suite."""
    return len(command) == 3 and command[1] == "-m" and command[0].startswith("python")


def in_suite_argv(copy: Path, command: list[str], message: str) -> list[str] | None:
    """Write the test file into ``copy`` (its ``tests`` folder when it has one) and return the pytest
    command that runs it; None when ``command`` is not ``python -m <pkg>``."""
    if not is_module_command(command):
        return None
    tests = copy / "tests"
    folder = tests if tests.is_dir() and not tests.is_symlink() else copy
    name = f"test_ticket_{secrets.token_hex(4)}"
    (folder / f"{name}.py").write_text(
        _TEST_FILE.format(module=command[2], message=message, offset=_OFFSET), encoding="utf-8"
    )
    # The whole folder is collected, so the suite's test modules are imported as in its own run (a switch
    # one of them sets at import is in force); only the added test runs.
    where = folder.relative_to(copy).as_posix() or "."
    return ["python", "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-k", name, where]


def exit_code(run: RunResult) -> int | None:
    """The command's own exit status from an in-suite run; None when the test never got to run it."""
    code = run.returncode
    return code - _OFFSET if code is not None and _OFFSET <= code < 2 * _OFFSET else None


def ask(
    ctx: Context, copy: Path, command: list[str], message: str, env: Mapping[str, str], label: str
) -> tuple[RunResult, int | None]:
    """Run the triage command on ``message`` in ``copy``: from inside the suite when it is ``python -m
    <pkg>`` (and that test ran), else as it is. (the run, the command's exit status or None)."""
    argv = in_suite_argv(copy, command, message)
    if argv is not None:
        run, _ = ctx.run(argv, cwd=copy, env=dict(env), label=label)
        code = exit_code(run)
        if code is not None:
            return run, code
    run, _ = ctx.run([*command, message], cwd=copy, env=dict(env), label=label)
    return run, run.returncode
