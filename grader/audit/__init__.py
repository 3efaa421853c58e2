"""The grader's eyes inside a submission's venv: a PEP 578 audit hook and a pytest result log.

``install_into`` copies the two modules (and the helper the plugin imports) into the venv; the sandbox turns
them on through ``PY_AUDIT_LOG``/``PY_AUDIT_ROOT`` and ``PYTEST_RESULT_LOG``; the readers here parse what
they wrote.

Both logs are written by processes the submission controls, so a hostile submission could write junk or
forge lines into them; the readers skip malformed lines. The third module here, ``_grader_guard.py``, is not
installed into the venv: grader.tamper copies it to a grader-owned folder and it writes through an inherited
file descriptor, which is what makes forged results evident (docs/security.md).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader._json import optional_text
from grader.safeio import UnsafeFile, read_bytes

__all__ = [
    "AuditLog",
    "Event",
    "Results",
    "install_into",
    "installed_digest",
    "read_audit_log",
    "read_result_log",
]

_HERE = Path(__file__).parent
# _pytest_longrepr.py: what the plugin imports (shared with the guard; a name that says nothing of a grader).
_MODULES = ("_grader_audit.py", "_grader_pytest.py", "_pytest_longrepr.py")
_PTH = "_grader_audit.pth"
_NETWORK_EVENTS = ("socket.connect", "socket.getaddrinfo", "socket.sendto", "socket.refused")
_FIRST_FAILURES = 10
# A suite's logs are small (one line per test or event); a bigger one was flooded on purpose.
LOG_CAP = 64 * 1024**2


@dataclass(frozen=True)
class Event:
    event: str  # "socket.connect" | "socket.getaddrinfo" | "socket.sendto" | "socket.__new__" | "open"
    where: str  # "file:line", repo-relative when the frame is in the repo
    host: str | None = None
    port: int | None = None
    path: str | None = None  # for "open": repo-relative
    pid: int | None = None

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}" if self.host is not None else (self.path or "")


@dataclass
class AuditLog:
    network_attempts: list[Event] = field(default_factory=list)  # connect/sendto/getaddrinfo/refused
    opened: set[str] = field(default_factory=set)  # repo-relative paths opened for reading
    opened_at: dict[str, set[str]] = field(
        default_factory=dict
    )  # path -> call sites ("file:line") that opened it
    sockets: list[Event] = field(default_factory=list)  # inet sockets created (socket.__new__)
    opened_by: dict[str, set[str]] = field(default_factory=dict)  # test id ("": none) -> paths it opened
    unsafe: str = ""  # why the log file was not read: replaced by a link, a FIFO, a device, over the cap


@dataclass
class Results:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    xfailed: int = 0
    xpassed: int = 0
    deselected: int = 0
    first_failures: list[str] = field(default_factory=list)  # "nodeid (file:line): first line of the error"
    exitstatus: int | None = None  # None: the session never finished (killed, crashed)
    records: int = 0  # well-formed lines read
    unsafe: str = ""  # why the log file was not read (see AuditLog.unsafe)


def _site_packages(venv: Path) -> list[Path]:
    found = sorted(venv.glob("lib/python3*/site-packages")) + sorted(venv.glob("Lib/site-packages"))
    if not found:
        raise FileNotFoundError(f"no site-packages folder in {venv}")
    return found


def installed_digest() -> str:
    """A digest of what ``install_into`` writes: part of a cached venv's key, so a grader whose hook or plugin
    changed never runs a submission against the copies an older grader left in the cache."""
    digest = hashlib.sha256()
    for name in _MODULES:
        digest.update(name.encode() + b"\0" + (_HERE / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def install_into(venv: Path) -> list[Path]:
    """Drop the audit hook, its .pth loader and the pytest plugin into ``venv``'s site-packages.

    Returns the modules written (to compile with the venv's interpreter).
    """
    written: list[Path] = []
    for site in _site_packages(Path(venv)):
        for name in _MODULES:
            shutil.copyfile(_HERE / name, site / name)
            written.append(site / name)
        (site / _PTH).write_text("import _grader_audit\n", encoding="utf-8")
    return written


def _records(path: Path | None, problems: list[str] | None = None) -> Iterator[dict[str, Any]]:
    # The sandboxed run owned the log's folder: the file may now be a link (to /dev/zero), a FIFO or huge.
    if path is None:
        return
    try:
        raw = read_bytes(path, cap=LOG_CAP)
    except UnsafeFile as exc:
        if problems is not None:
            problems.append(f"{Path(path).name}: {exc.strerror}")
        return
    except OSError:
        return
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def _opt_int(value: object) -> int | None:
    try:
        return None if value is None else int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def read_audit_log(path: Path | None) -> AuditLog:
    """Parse the hook's JSONL; a missing file is an empty log, malformed lines are skipped."""
    log = AuditLog()
    problems: list[str] = []
    for rec in _records(path, problems):
        kind = rec.get("event")
        if not isinstance(kind, str):
            continue
        event = Event(
            event=kind,
            where=str(rec.get("where", "?")),
            host=optional_text(rec.get("host")),
            port=_opt_int(rec.get("port")),
            path=optional_text(rec.get("path")),
            pid=_opt_int(rec.get("pid")),
        )
        if kind in _NETWORK_EVENTS:
            log.network_attempts.append(event)
        elif kind == "socket.__new__":
            log.sockets.append(event)
        elif kind == "open" and event.path:
            log.opened.add(event.path)
            log.opened_at.setdefault(event.path, set()).add(event.where)
            # "": opened while no test ran (collection: a module-level read of a data file), or by a process
            # the guard is not in
            log.opened_by.setdefault(optional_text(rec.get("test")) or "", set()).add(event.path)
    log.unsafe = "; ".join(problems)
    return log


def read_result_log(path: Path | None) -> Results:
    """Tally the pytest plugin's JSONL (``records == 0``: the plugin never wrote, e.g. pytest never ran)."""
    res = Results()
    problems: list[str] = []
    for rec in _records(path, problems):
        res.records += 1
        if rec.get("session") is True:
            res.exitstatus = _opt_int(rec.get("exitstatus"))
            res.deselected = _opt_int(rec.get("deselected")) or 0
            continue
        when, outcome, xfail = rec.get("when"), rec.get("outcome"), bool(rec.get("wasxfail"))
        if outcome == "skipped":
            if xfail:
                res.xfailed += 1
            else:
                res.skipped += 1
        elif outcome == "passed":
            if when == "call":
                if xfail:
                    res.xpassed += 1
                else:
                    res.passed += 1
        elif outcome in ("failed", "error"):
            if when == "call":
                res.failed += 1
            else:
                res.errors += 1  # setup, teardown or collection
            if len(res.first_failures) < _FIRST_FAILURES:
                where = rec.get("crash") or rec.get("location") or "?"
                res.first_failures.append(f"{rec.get('nodeid', '?')} ({where}): {rec.get('longrepr', '')}")
    res.unsafe = "; ".join(problems)
    return res
