"""The first line of a pytest report's error, shared by the grader's two pytest plugins.

Copied under this neutral name next to each plugin: into the guard's folder (``tamper.write_guard``, first on
the run's ``PYTHONPATH``) and into the venv's site-packages (``audit.install_into``), so both plugins import
it from the folder they were loaded from. It imports nothing of pytest's: it only reads report attributes.
"""

from typing import Any

__all__ = ["first_line", "message"]


def first_line(text: object) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()[:500]
    return ""


def message(report: Any) -> str:
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (file, line, reason)
        return first_line(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return first_line(crash.message)
    return first_line(longrepr)
