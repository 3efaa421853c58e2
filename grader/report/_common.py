"""Small helpers the human-readable renderers share."""

from __future__ import annotations

from typing import Any


def row_state(row: dict[str, Any]) -> str:
    """``scored``, ``manual`` or ``na`` (not assessable, or a row without a score)."""
    status = row.get("status", "scored" if row.get("score") is not None else "not-assessable")
    if status == "manual":
        return "manual"
    return "scored" if status == "scored" and row.get("score") is not None else "na"


def score_cell(row: dict[str, Any]) -> str:
    """``3/3`` for a scored row, ``manual`` or ``n/a`` otherwise."""
    state = row_state(row)
    if state == "scored":
        return f"{row['score']}/{row['max']}"
    return "manual" if state == "manual" else "n/a"


def number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def total_line(report: dict[str, Any]) -> str:
    total = report.get("total") or {}
    line = (
        f"{number(total.get('points', 0))}/{number(total.get('max', 0))} ({number(total.get('percent', 0))}%)"
    )
    rows = report.get("rows") or []
    manual = sum(1 for r in rows if r.get("status") == "manual")
    missing = sum(1 for r in rows if r.get("status") == "not-assessable")
    unscored = [f"{manual} manual"] * bool(manual) + [f"{missing} not assessable"] * bool(missing)
    if unscored:
        # The percentage only covers scored rows; say so, or a reader takes it for the whole rubric.
        line += f", excluding {' and '.join(unscored)}"
    return line


def short_commit(report: dict[str, Any]) -> str:
    commit = str(report.get("commit") or "")
    return commit[:12] if commit else "(no commit)"
