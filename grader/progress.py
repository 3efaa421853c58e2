"""Progress for people: a live display on a terminal, plain lines otherwise, nothing with --quiet.

One interface for a single grade and for a batch (``who`` names the candidate, or is ``""``):

- ``start(who, total_steps)``; ``step(who, step, seconds, message)`` after each pipeline step;
  ``finish(who, line)`` when that grade is over; ``say(line)`` for a line that must stay (errors, results);
  ``close()`` at the end.

Plain lines (not a terminal) are the historic format: ``[step] 0.3s message``, prefixed with the candidate
in a batch. The live display keeps those finished lines scrolling above a small block that is redrawn in
place: one line per candidate being graded (step k of n, the last step's message, seconds so far) and, in a
batch, ``done/total``. ~100 lines of our own rather than a dependency: the grader only needs this much.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

from grader.inert import inert

__all__ = ["Display", "LinesDisplay", "LiveDisplay", "QuietDisplay", "make_display"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class Display:
    """Base: the interface, doing nothing (which is exactly --quiet, apart from errors)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def start(self, who: str, total_steps: int) -> None:
        return None

    def step(self, who: str, step: str, seconds: float, message: str) -> None:
        return None

    def finish(self, who: str, line: str) -> None:
        return None

    def say(self, line: str) -> None:
        return None

    def error(self, line: str) -> None:
        """An error line: printed in every mode, --quiet included."""
        self._write(line + "\n")

    def close(self) -> None:
        return None

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


class QuietDisplay(Display):
    """--quiet: errors only."""


class LinesDisplay(Display):
    """Not a terminal (a log file, CI): one plain line per event, never a control character."""

    def step(self, who: str, step: str, seconds: float, message: str) -> None:
        self._write(_clean(f"{_prefix(who)}[{step}] {seconds:.1f}s {message}".rstrip()) + "\n")

    def finish(self, who: str, line: str) -> None:
        self._write(_clean(f"{_prefix(who)}{line}") + "\n")

    def say(self, line: str) -> None:
        self._write(_clean(line) + "\n")


@dataclass
class _Task:
    total: int
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    step: str = "starting"
    message: str = ""


class LiveDisplay(LinesDisplay):
    """A terminal: finished lines scroll; a block under them is redrawn in place while grades run."""

    _FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def __init__(self, stream: TextIO, *, batch_total: int = 0, interval: float = 0.2) -> None:
        super().__init__(stream)
        self._batch_total = batch_total
        self._done = 0
        self._active: dict[str, _Task] = {}
        self._drawn = 0
        self._frame = 0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, args=(interval,), daemon=True)
        self._ticker.start()

    def start(self, who: str, total_steps: int) -> None:
        with self._lock:
            self._active[who] = _Task(total_steps)
            self._redraw()

    def step(self, who: str, step: str, seconds: float, message: str) -> None:
        with self._lock:
            task = self._active.get(who)
            if task is not None:
                task.done, task.step, task.message = task.done + 1, step, message
            self._redraw(f"{_prefix(who)}[{step}] {seconds:.1f}s {message}".rstrip())

    def finish(self, who: str, line: str) -> None:
        with self._lock:
            self._active.pop(who, None)
            self._done += 1
            self._redraw(f"{_prefix(who)}{line}")

    def say(self, line: str) -> None:
        with self._lock:
            self._redraw(line)

    def error(self, line: str) -> None:
        self.say(line)

    def close(self) -> None:
        self._stop.set()
        self._ticker.join(timeout=2)
        with self._lock:
            self._active.clear()
            self._batch_total = 0
            self._redraw()

    def _tick(self, interval: float) -> None:
        while not self._stop.wait(interval):
            with self._lock:
                self._frame += 1
                if self._active:
                    self._redraw()

    def _redraw(self, permanent: str | None = None) -> None:
        width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        out = [f"\x1b[{self._drawn}F\x1b[J" if self._drawn else "\r\x1b[J"]
        if permanent is not None:
            out.append(_fit(permanent, width) + "\n")
        block: list[str] = []
        spin = self._FRAMES[self._frame % len(self._FRAMES)]
        now = time.monotonic()
        for who, task in self._active.items():
            elapsed = now - task.started
            line = f"{spin} {_prefix(who)}{task.done}/{task.total} {task.step} {elapsed:.0f}s {task.message}"
            block.append(_fit(line, width))
        if self._batch_total:
            block.append(_fit(f"  {self._done}/{self._batch_total} candidates graded", width))
        out.extend(line + "\n" for line in block)
        self._drawn = len(block)
        self._write("".join(out))


def _prefix(who: str) -> str:
    return f"{who}  " if who else ""


def _clean(line: str) -> str:
    # Messages can quote submission output: no control character (an escape sequence) reaches the terminal.
    return _CONTROL.sub(" ", inert(line))


def _fit(line: str, width: int) -> str:
    # A wrapped line would break the cursor arithmetic of the redraw.
    line = _clean(line).rstrip()
    return line if len(line) <= width else line[: width - 1] + "…"


def make_display(
    stream: TextIO | None = None, *, quiet: bool = False, live: bool | None = None, batch_total: int = 0
) -> Display:
    """The display for this stream: quiet, live (a terminal, unless TERM=dumb) or plain lines."""

    stream = sys.stderr if stream is None else stream
    if quiet:
        return QuietDisplay(stream)
    if live is None:
        isatty = getattr(stream, "isatty", None)
        live = bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"
    return LiveDisplay(stream, batch_total=batch_total) if live else LinesDisplay(stream)
