"""Gradescope: an autograder ``results.json`` (Gradescope's documented keys only).

One test per rubric row: ``name`` the row title, ``number`` its position (Gradescope orders tests by it),
``score`` the row's score times its weight and ``max_score`` the scale's top times its weight, so the tests
add up to the report's weighted total (a manual or not-assessable row counts toward neither side, as in the
report: score 0 of 0). ``status`` passed/failed, ``output`` the evidence and details (with the unweighted
0-3 score), ``tags`` the row id, ``extra_data`` the row id, weight, status and 0-3 score. The top-level
``score`` is the report's weighted total; set the assignment's points to ``extra_data.max_points``.
"""

from __future__ import annotations

import json
from typing import Any

from grader.report._common import number, score_cell, total_line
from grader.rubric import plain_number

__all__ = ["render", "to_results"]


def _test(index: int, row: dict[str, Any]) -> dict[str, Any]:
    status = row.get("status", "scored")
    scored = status == "scored" and row.get("score") is not None
    lines = [f"{row['id']}: {score_cell(row)} (weight {number(row.get('weight', 1))})"]
    if status == "manual":
        lines.append("Needs a reviewer: the grader could not decide this row.")
    elif not scored:
        lines.append("Not assessable: the grader could not run what this row needs.")
    if row.get("evidence"):
        lines.append(str(row["evidence"]))
    lines += [f"- {detail}" for detail in row.get("details") or []]
    weight = row.get("weight", 1)
    test: dict[str, Any] = {
        "name": str(row.get("title") or row["id"]),
        "number": str(index),
        "score": plain_number(row["score"] * weight) if scored else 0,
        "max_score": plain_number(row.get("max", 3) * weight) if scored else 0,
        "output": "\n".join(lines),
        "output_format": "text",
        "tags": [str(row["id"])],
        "visibility": "visible",
        "extra_data": {"row": row["id"], "weight": weight, "status": status, "row_score": row.get("score")},
    }
    if scored:
        test["status"] = "passed" if row["score"] >= row.get("max", 3) else "failed"
    return test


def to_results(report: dict[str, Any]) -> dict[str, Any]:
    """Gradescope's results.json (a dict) for a grade-report/1 dict."""
    total = report.get("total") or {}
    rubric = report.get("rubric") or {}
    seconds = sum(v for v in (report.get("timings") or {}).values() if isinstance(v, (int, float)))
    return {
        "score": total.get("points", 0),
        "execution_time": round(seconds),
        "output": f"Total {total_line(report)}; rubric {rubric.get('name', '')}",
        "output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [_test(index, row) for index, row in enumerate(report.get("rows") or [], start=1)],
        "extra_data": {
            "max_points": total.get("max", 0),
            "percent": total.get("percent", 0),
            "commit": report.get("commit"),
            "target": report.get("target", ""),
            "rubric_sha256": rubric.get("sha256", ""),
            "grader_version": report.get("grader_version", ""),
        },
    }


def render(report: dict[str, Any]) -> str:
    """results.json text (two-space indent, trailing newline)."""
    return json.dumps(to_results(report), indent=2, ensure_ascii=False) + "\n"
