"""A pytest plugin (``-p _grader_pytest``) writing the grader's own record of a test run.

Inert unless ``GRADER_RESULT_LOG`` is set. Writes one JSON line per test report and a final session line,
flushed as it goes so a run killed at the deadline still leaves what it did. The grader reads this file
rather than parsing the suite's console output, which the submission controls.
"""

import json
import os

_LOG = os.environ.get("GRADER_RESULT_LOG")
# Under pytest-xdist the controller re-reports every worker's results: only the controller writes.
_ACTIVE = bool(_LOG) and not os.environ.get("PYTEST_XDIST_WORKER")
_state = {"file": None, "deselected": 0}


def _write(record):
    if _state["file"] is None:
        _state["file"] = open(_LOG, "a", encoding="utf-8")  # kept open for the whole session
    _state["file"].write(json.dumps(record, default=str) + "\n")
    _state["file"].flush()


def _first_line(text):
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()[:500]
    return ""


def _message(report):
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (file, line, reason)
        return _first_line(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return _first_line(crash.message)
    return _first_line(longrepr)


def _crash_location(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is None or not getattr(crash, "path", None):
        return None
    path = str(crash.path)
    try:
        path = os.path.relpath(path)
    except ValueError:
        pass
    return f"{path}:{crash.lineno}"


def pytest_runtest_logreport(report):
    if not _ACTIVE:
        return
    fspath, lineno, _ = report.location
    _write(
        {
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "wasxfail": hasattr(report, "wasxfail"),
            "longrepr": _message(report),
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
                "longrepr": _message(report),
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
