"""Facts as JSON: checks may report sets, paths or tuples; reports and stored runs need plain JSON."""

from __future__ import annotations

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
