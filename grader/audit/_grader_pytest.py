"""A pytest plugin (``-p _grader_pytest``) writing the grader's own record of a test run.

Inert unless ``PYTEST_RESULT_LOG`` is set. Writes one JSON line per test report and a final session line,
flushed as it goes so a run killed at the deadline still leaves what it did. The grader reads this file
rather than parsing the suite's console output, which the submission controls.
"""

import json
import os
import re
import sys

# Copied next to this file wherever it goes (audit.install_into, tamper.write_guard).
from _pytest_longrepr import message

_LOG = os.environ.get("PYTEST_RESULT_LOG")
# Under pytest-xdist the controller re-reports every worker's results: only the controller writes.
_ACTIVE = bool(_LOG) and not os.environ.get("PYTEST_XDIST_WORKER")
_state = {"file": None, "deselected": 0}


def _write(record):
    if _state["file"] is None:
        _state["file"] = open(_LOG, "a", encoding="utf-8")  # kept open for the whole session
    _state["file"].write(json.dumps(record, default=str) + "\n")
    _state["file"].flush()


def _inside(path):
    # The suite runs from the submission's root: a frame there is one a reviewer can open.
    try:
        rel = os.path.relpath(str(path))
    except ValueError:
        return None
    return None if rel.startswith("..") or os.path.isabs(rel) else rel


_NATIVE_FRAME = re.compile(r'^\s*File "([^"\n]+)", line (\d+)', re.M)


def _crash_location(report):
    """The innermost frame inside the submission: a failure raised in a dependency or the standard library
    is shown where the submission's code called into it."""
    entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", None) or ()
    for entry in reversed(entries):
        loc = getattr(entry, "reprfileloc", None)
        rel = _inside(loc.path) if loc is not None and getattr(loc, "path", None) else None
        if rel is not None:
            return f"{rel}:{loc.lineno}"
        # `--tb=native`, which every suite run is given: one entry of Python's own traceback text.
        for path, lineno in reversed(_NATIVE_FRAME.findall("".join(getattr(entry, "lines", None) or ()))):
            rel = _inside(path)
            if rel is not None:
                return f"{rel}:{lineno}"
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is None or not getattr(crash, "path", None):
        return None
    return f"{_inside(crash.path) or crash.path}:{crash.lineno}"


def pytest_runtest_logreport(report):
    if not _ACTIVE:
        return
    # A subtest (pytest's `subtests` fixture, unittest's subTest) is reported besides its test's own report,
    # under the same id. Like the guard, this log counts the test once, failed when any of its subtests
    # failed; counted apart, an honest suite with subtests looked forged (red team 4, F9).
    if type(report).__name__ in ("SubtestReport", "SubTestReport"):
        if report.failed:
            _state.setdefault("subfailed", {})[(report.nodeid, report.when)] = message(report)
        return
    outcome, longrepr = report.outcome, message(report)
    failed_inside = _state.get("subfailed", {}).pop((report.nodeid, report.when), None)
    if outcome == "passed" and failed_inside is not None:
        outcome, longrepr = "failed", failed_inside or "a subtest failed"
    fspath, lineno, _ = report.location
    _write(
        {
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": outcome,
            "wasxfail": hasattr(report, "wasxfail"),
            "longrepr": longrepr,
            "location": f"{fspath}:{(lineno or 0) + 1}",
            "crash": _crash_location(report),
        }
    )


def pytest_collectreport(report):
    if _ACTIVE and report.failed:
        _write(
            {
                "nodeid": report.nodeid,
                "when": "collect",
                "outcome": "error",
                "wasxfail": False,
                "longrepr": message(report),
                "location": report.nodeid.split("::")[0],
                "crash": _crash_location(report),
            }
        )


def pytest_deselected(items):
    _state["deselected"] += len(items)


def pytest_sessionfinish(session, exitstatus):
    if not _ACTIVE:
        return
    _write(
        {
            "session": True,
            "exitstatus": int(exitstatus),
            "collected": getattr(session, "testscollected", None),
            "deselected": _state["deselected"],
        }
    )
    _state["file"].close()
    _state["file"] = None


def _refused_target(frame):
    # The function that refused: pytest-socket's guarded getaddrinfo/gethostbyname keep the call's arguments
    # in ``_args``; its connect guard names the host. A guarded ``socket()`` has no target yet.
    args = frame.f_locals.get("_args") if frame is not None else None
    if isinstance(args, tuple) and args:
        port = args[1] if len(args) > 1 else None
        return str(args[0]), port if isinstance(port, int) else None
    host = frame.f_locals.get("host") if frame is not None else None
    return (str(host), None) if isinstance(host, str) else (None, None)


def _report_refusals():
    """Raise an audit event from every pytest-socket refusal.

    pytest-socket refuses before a socket exists, so the audit hook sees nothing; a test that swallows the
    refusal (``try: httpx.get(...) except Exception: pass``) would leave no trace at all. The audit hook
    (``_grader_audit``) records the event with the submission's file:line.
    """
    try:  # optional in the submission's venv
        import pytest_socket
    except Exception:  # no pytest-socket: nothing refuses, nothing to report
        return
    for name in ("SocketBlockedError", "SocketConnectBlockedError"):
        cls = getattr(pytest_socket, name, None)
        if cls is None or getattr(cls.__init__, "_grader_reports", False):
            continue

        def __init__(self, *args, _original=cls.__init__, **kwargs):
            try:
                host, port = _refused_target(sys._getframe(1))
                sys.audit("grader.socket_refused", host, port)
            except Exception:  # noqa: S110 - reporting must never change what the suite sees
                pass
            _original(self, *args, **kwargs)

        __init__._grader_reports = True
        cls.__init__ = __init__


if os.environ.get("PY_AUDIT_LOG"):
    _report_refusals()
