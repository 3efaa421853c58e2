"""JSON helpers: facts made plain JSON for reports and stored runs; a probe script's marked answer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` with mappings, sequences and sets made JSON-safe (sets sorted, so output is stable)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [jsonable(v) for v in items]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def marked_answer(stdout: str, marker: str) -> dict[str, Any] | None:
    """The JSON object on the last output line starting with ``marker`` (a grader probe script's answer),
    or None when there is none or it is not a JSON object."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(marker):
            try:
                answer = json.loads(line[len(marker) :])
            except ValueError:
                return None
            return answer if isinstance(answer, dict) else None
    return None


def optional_text(value: object) -> str | None:
    """A JSON value read back as text, None staying None."""
    return None if value is None else str(value)


def mapping(value: object) -> dict[str, Any]:
    """A parsed JSON/TOML/YAML table, or an empty one for anything else (what a submission wrote may have
    any shape)."""
    return value if isinstance(value, dict) else {}
