"""Progress for people: plain lines when stderr is not a terminal, a live display on one (a real pty),
and nothing but errors with --quiet."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.progress import LinesDisplay, LiveDisplay, QuietDisplay, make_display

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "sample_solution")
_STEP_LINE = re.compile(r"^\[[a-z][a-z-]*\] \d+\.\ds( .*)?$")


def grade(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "grader", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.index
def test_not_a_terminal_prints_one_plain_line_per_step(tmp_path: Path) -> None:
    result = grade(["--timeout", "120", "--output", str(tmp_path / "r.txt"), SAMPLE], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("[acquire] ") and lines[-1].startswith("[done] ")
    assert {"[replay]", "[install]", "[secrets]"} <= {line.split()[0] for line in lines}
    assert all(_STEP_LINE.match(line) for line in lines), lines
    assert "\x1b" not in result.stderr and "\r" not in result.stderr


@pytest.mark.index
def test_quiet_prints_the_report_and_no_progress(tmp_path: Path) -> None:
    result = grade(["--quiet", "--timeout", "120", "--format", "json", SAMPLE], tmp_path)
    assert result.returncode == 0
    assert result.stderr == ""
    assert result.stdout.lstrip().startswith("{")


def test_quiet_still_prints_errors(tmp_path: Path) -> None:
    result = grade(["--quiet", str(tmp_path / "missing")], tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("grade: error: ") and result.stderr.count("\n") == 1


@pytest.mark.index
def test_a_terminal_gets_a_live_display_with_every_step(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm", "COLUMNS": "120"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader", "--timeout", "120", "--output", str(tmp_path / "r.txt"), SAMPLE],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    for step in ("[acquire]", "[install]", "[replay]", "[secrets]", "[done]"):
        assert step in screen, screen[-2000:]
    assert "\x1b[" in screen  # the live block is redrawn in place
    assert re.search(r"\d+/\d+ ", screen), "the live line counts steps"


def test_plain_lines_name_the_candidate_in_a_batch() -> None:
    stream = io.StringIO()
    display = LinesDisplay(stream)
    display.start("alice", 4)
    display.step("alice", "replay", 1.25, "24 passed")
    display.step("", "acquire", 0.04, "")
    display.finish("alice", "graded 54/54 (100.0%)")
    display.error("grade: error: x")
    display.close()
    assert stream.getvalue().splitlines() == [
        "alice  [replay] 1.2s 24 passed",
        "[acquire] 0.0s",
        "alice  graded 54/54 (100.0%)",
        "grade: error: x",
    ]


def test_quiet_display_keeps_only_errors() -> None:
    stream = io.StringIO()
    display = make_display(stream, quiet=True)
    assert isinstance(display, QuietDisplay)
    display.start("a", 3)
    display.step("a", "replay", 1.0, "x")
    display.finish("a", "done")
    display.say("[done]")
    display.error("grade: error: boom")
    assert stream.getvalue() == "grade: error: boom\n"


def test_live_display_redraws_a_block_per_candidate_and_clears_it() -> None:
    stream = _Terminal()
    display = make_display(stream, batch_total=2)
    assert isinstance(display, LiveDisplay)
    display.start("alice", 11)
    display.start("bob", 11)
    display.step("alice", "replay", 1.0, "24 passed")
    text = stream.getvalue()
    assert "alice  [replay] 1.0s 24 passed\n" in text
    assert "alice  1/11 replay" in text and "bob  0/11 starting 0s\n" in text
    assert "0/2 candidates graded" in text
    display.finish("alice", "graded 54/54")
    display.close()
    tail = stream.getvalue()[len(text) :]
    assert "alice  graded 54/54" in tail
    # The last redraw moves up over the old block, clears it and draws nothing after it.
    assert tail.endswith("\x1b[J")


def test_live_lines_never_wrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    stream = _Terminal()
    display = LiveDisplay(stream)
    display.start("", 3)
    display.step("", "replay", 1.0, "x" * 5000)
    display.close()
    plain = re.sub(r"\x1b\[\d*[A-Za-z]", "", stream.getvalue()).replace("\r", "")
    assert max(len(line) for line in plain.splitlines()) < 60
