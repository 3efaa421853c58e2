"""JSON Schemas shipped with the grader: the report (grade-report/1), the rubric YAML (version 1) and the
drift report (grade-drift/1)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["SCHEMAS", "load_schema"]

SCHEMAS = ("grade-report", "rubric", "grade-drift")


def load_schema(name: str) -> dict[str, Any]:
    """The schema ``name`` (``grade-report`` or ``rubric``, ``.schema.json`` optional) as a dict."""
    stem = name.removesuffix(".json").removesuffix(".schema")
    if stem not in SCHEMAS:
        raise ValueError(f"unknown schema {name!r}; known: {', '.join(SCHEMAS)}")
    text = resources.files(__name__).joinpath(f"{stem}.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
