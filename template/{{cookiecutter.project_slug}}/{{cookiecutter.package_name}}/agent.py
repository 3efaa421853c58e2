"""Triage one support message: ask the model, then hold its answer to a strict shape."""

from __future__ import annotations

import json
from typing import Any

import httpx

from .client import complete

INTENTS = ("refund", "billing", "shipping", "technical", "account", "other")

# TODO(candidate): this prompt works but is minimal. Improve it (definitions, edge cases, examples) and
# re-record. The ticket itself always goes in the user message, unchanged; instructions stay here.
SYSTEM_PROMPT = (
    "You triage customer support messages. Reply with only a JSON object, no prose: "
    '{"intent": one of "refund", "billing", "shipping", "technical", "account", "other", '
    '"needs_human": true if the customer threatens legal action, reports fraud or a hacked or stolen '
    "account, demands a manager, or is furious; otherwise false}."
)


class TriageError(ValueError):
    """The model's answer was not the JSON object the contract asks for."""


def parse_answer(text: str) -> dict[str, Any]:
    """Parse the model's reply strictly: exactly ``{"intent": <known intent>, "needs_human": <bool>}``."""
    # TODO(candidate): decide whether to tolerate code fences or extra keys, and test that decision.
    try:
        data = json.loads(text)
    except ValueError:
        raise TriageError(f"model answer is not JSON: {text[:120]!r}") from None
    if not isinstance(data, dict) or set(data) != {"intent", "needs_human"}:
        raise TriageError(f"model answer must have exactly the keys intent and needs_human: {text[:120]!r}")
    if data["intent"] not in INTENTS:
        raise TriageError(f"model answer has unknown intent {data['intent']!r}; expected one of {INTENTS}")
    if not isinstance(data["needs_human"], bool):
        raise TriageError(f"model answer has non-boolean needs_human {data['needs_human']!r}")
    return {"intent": data["intent"], "needs_human": data["needs_human"]}


def triage(message: str, *, client: httpx.Client | None = None) -> dict[str, Any]:
    """Classify a support message: ``{"intent": str, "needs_human": bool}``."""
    # TODO(candidate): validate the input (empty, huge, non-text) before spending a model call on it.
    return parse_answer(complete(SYSTEM_PROMPT, message, client=client))
