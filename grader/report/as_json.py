"""JSON: the grade-report/1 document, keys in schema order, two-space indent, trailing newline."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["render"]

_ORDER = (
    "schema", "target", "commit", "graded_at", "grader_version", "rubric", "isolation",
    "rows", "total", "facts", "timings", "findings", "notes",
)  # fmt: skip


def render(report: dict[str, Any]) -> str:
    # Schema order first so two reports diff line by line; unknown keys keep their place after.
    ordered = {key: report[key] for key in _ORDER if key in report}
    ordered.update((key, value) for key, value in report.items() if key not in ordered)
    return json.dumps(ordered, indent=2, ensure_ascii=False, default=str) + "\n"
