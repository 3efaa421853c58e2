"""Processes a test session started and left running, found through /proc (Linux).

Every process the suite starts inherits ``SESSION_VARIABLE`` from the session's environment, so one that
outlived its fixture is found even after it was reparented (a daemon that double-forked, a server whose
wrapper was killed but not its group). Sandboxed runs get a scrubbed environment: the sandbox's own pid
namespace ends them, and tests/test_sandbox.py checks that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

__all__ = ["SESSION_VARIABLE", "end_group", "leftovers", "wait_for"]

SESSION_VARIABLE = "KIT_TEST_SESSION"


def wait_for(condition, within: float = 60.0, every: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    """Poll ``condition()`` until it is true or a generous deadline passes: a busy machine is slow, not
    wrong. Returns whether it became true."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


def _status(pid: str) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone or unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return (fields[0], int(fields[1])) if len(fields) > 1 else None


def _marked(pid: str, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _cmdline(pid: str) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)[:200]


def _running(value: str) -> list[tuple[int, str]]:
    me = os.getpid()
    needle = f"{SESSION_VARIABLE}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        status = _status(entry)
        if status is None or status[0] in ("Z", "X"):  # dead: only its exit status is left
            continue
        if status[1] == me or _marked(entry, needle):
            found.append((int(entry), _cmdline(entry)))
    return found


def leftovers(value: str, *, within: float = 30.0) -> list[tuple[int, str]]:
    """(pid, command line) of every live process this session started that is still running (its
    children, and any process whose environment holds ``SESSION_VARIABLE=value``), after waiting up to
    ``within`` seconds for them to end."""
    if not Path("/proc/self/environ").exists():
        return []
    wait_for(lambda: not _running(value), within=within, every=0.2)
    return _running(value)


def end_group(proc: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """End a server a fixture started with ``start_new_session=True``: its whole process group (whatever
    it forked), SIGTERM first, SIGKILL when it does not stop within ``timeout``; then reap it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=timeout)
            if not _group_alive(proc.pid):
                break
            wait_for(lambda: not _group_alive(proc.pid), within=timeout)
            if not _group_alive(proc.pid):
                break
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
