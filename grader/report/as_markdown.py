"""Markdown: pasteable into an applicant tracker or a PR comment (a row table, then details per row)."""

from __future__ import annotations

from typing import Any

from grader.report._common import number, score_cell, short_commit, total_line

__all__ = ["render"]


# Brackets are what a submission's string needs to make a link or an image (fetched when the report is
# viewed, e.g. a tracking pixel or a fake "total" pointing elsewhere): escaped, they read as written.
_ACTIVE = str.maketrans({"[": "\\[", "]": "\\]"})


def _cell(text: Any) -> str:
    # A pipe ends a table cell and a newline ends the row; `<` could open HTML in a PR comment.
    return _inline(str(text).replace("\\", "\\\\")).replace("|", "\\|")


def _inline(text: Any) -> str:
    return " ".join(str(text).split()).translate(_ACTIVE).replace("<", "&lt;")


def render(report: dict[str, Any]) -> str:
    rubric = report.get("rubric") or {}
    isolation = report.get("isolation") or {}
    out = [
        f"## Grade report: {_inline(report.get('target', ''))}",
        "",
        f"- **Total:** {total_line(report)}",
        f"- **Commit:** `{short_commit(report)}`",
        f"- **Rubric:** {_inline(rubric.get('name', ''))} (`{str(rubric.get('sha256', ''))[:12]}`)",
        f"- **Isolation:** network {_inline(isolation.get('network', '?'))}, "
        f"credentials {_inline(isolation.get('credentials', '?'))}, "
        f"filesystem {_inline(isolation.get('filesystem', '?'))}",
        f"- **Graded:** {_inline(report.get('graded_at', ''))}"
        f" by grader {_inline(report.get('grader_version', ''))}",
        "",
        "| row | score | weight | evidence |",
        "| --- | :---: | ---: | --- |",
    ]
    rows = report.get("rows") or []
    for row in rows:
        cells = (
            f"`{_cell(row['id'])}`",
            score_cell(row),
            number(row["weight"]),
            _cell(row.get("evidence", "")),
        )
        out.append(f"| {' | '.join(cells)} |")
    out.append("")
    detailed = [row for row in rows if row.get("details")]
    if detailed:
        out += ["### Details", ""]
        for row in detailed:
            out += [f"#### `{row['id']}`: {_inline(row.get('title', ''))} ({score_cell(row)})", ""]
            out += [f"- {_inline(line)}" for line in row["details"]]
            out.append("")
    notes = report.get("notes") or []
    if notes:
        out += ["### Notes", ""]
        out += [f"- {_inline(note)}" for note in notes]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
