"""Where the triage command is asked from inside the suite (grader/checks/ask_in_suite.py): the test added
to a copy, run by the real pytest so that what the suite sets up for its own tests is in force."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from grader.checks.ask_in_suite import exit_code, in_suite_argv

# A package whose command prints what the suite's switch says, and a test module whose autouse fixture
# (in force for its own tests only) sets that switch.
FILES = {
    "bot/__init__.py": "",
    "bot/__main__.py": "import os, sys\nprint(os.environ.get('SWITCH', 'off'), sys.argv[1])\n",
    "tests/test_mod.py": textwrap.dedent(
        """\
        import pytest


        @pytest.fixture(autouse=True)
        def _switch(monkeypatch):
            monkeypatch.setenv("SWITCH", "on")


        class TestLabels:
            @pytest.mark.parametrize("n", [1])
            def test_label(self, n):
                assert n
        """
    ),
}


def _copy(tmp_path: Path) -> Path:
    for rel, text in FILES.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def _run(copy: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, *argv[1:]]
    return subprocess.run(argv, cwd=copy, capture_output=True, text=True, timeout=120, check=False)


def test_asked_beside_a_test_the_modules_fixtures_are_in_force(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    argv = in_suite_argv(
        copy, ["python", "-m", "bot"], "where is my parcel", "tests/test_mod.py::TestLabels::test_label[1]"
    )
    assert argv is not None
    name = argv[argv.index("-k") + 1]
    assert name.startswith("test_label_"), name  # named after the test: a switch keyed to its name holds
    done = _run(copy, argv)
    assert "on where is my parcel" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 100  # the command's own exit status, offset


def test_asked_in_a_file_of_its_own_the_modules_fixtures_are_not(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    argv = in_suite_argv(copy, ["python", "-m", "bot"], "where is my parcel")
    assert argv is not None
    done = _run(copy, argv)
    assert "off where is my parcel" in done.stdout, done.stdout + done.stderr


def test_a_module_that_is_a_link_or_outside_the_copy_is_not_written(tmp_path: Path) -> None:
    copy = _copy(tmp_path / "copy")
    outside = tmp_path / "outside.py"
    outside.write_text("def test_x():\n    pass\n", encoding="utf-8")
    (copy / "tests" / "test_link.py").symlink_to(outside)
    for nodeid in ("tests/test_link.py::test_x", "../outside.py::test_x", "/etc/passwd::x"):
        argv = in_suite_argv(copy, ["python", "-m", "bot"], "hello there friend", nodeid)
        assert argv is not None and argv[argv.index("-k") + 1].startswith("test_ticket_"), argv
    assert outside.read_text(encoding="utf-8") == "def test_x():\n    pass\n"


def test_only_a_python_dash_m_command_is_asked_inside(tmp_path: Path) -> None:
    assert in_suite_argv(_copy(tmp_path), ["./triage.sh"], "hello", "tests/test_mod.py::test_x") is None


def test_exit_code_reads_the_offset_status() -> None:
    class Run:
        returncode = 102

    assert exit_code(Run()) == 2  # type: ignore[arg-type]
    Run.returncode = 1
    assert exit_code(Run()) is None  # type: ignore[arg-type]
