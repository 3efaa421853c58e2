"""Text: for a terminal; aligned columns, score as ``3/3``, ``manual`` or ``n/a``, details indented."""

from __future__ import annotations

from typing import Any

from grader.report._common import number, score_cell, short_commit, total_line

__all__ = ["render"]


def _flat(text: Any) -> str:
    return " ".join(str(text).split())


def render(report: dict[str, Any]) -> str:
    rubric = report.get("rubric") or {}
    isolation = report.get("isolation") or {}
    rows = report.get("rows") or []
    out = [
        f"grade report: {_flat(report.get('target', ''))}",
        f"commit {short_commit(report)}  rubric {_flat(rubric.get('name', ''))}"
        f" ({str(rubric.get('sha256', ''))[:12]})",
        f"isolation: network {isolation.get('network', '?')},"
        f" credentials {isolation.get('credentials', '?')}, filesystem {isolation.get('filesystem', '?')}",
        "",
    ]
    table = [("ROW", "SCORE", "WEIGHT", "EVIDENCE")]
    table += [
        (row["id"], score_cell(row), number(row["weight"]), _flat(row.get("evidence", ""))) for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(3)]
    for index, line in enumerate(table):
        out.append(
            "  ".join(cell.ljust(width) for cell, width in zip(line[:3], widths, strict=True))
            + "  "
            + line[3]
        )
        if index:
            out += [
                f"{' ' * (widths[0] + 2)}- {_flat(detail)}" for detail in rows[index - 1].get("details", [])
            ]
    out += ["", f"total: {total_line(report)}"]
    out += [f"note: {_flat(note)}" for note in report.get("notes") or []]
    return "\n".join(out) + "\n"
