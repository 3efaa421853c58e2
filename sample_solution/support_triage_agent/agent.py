"""Triage one support message: ask the model, then hold its answer to a strict shape."""

from __future__ import annotations

import json
from typing import Any

import httpx

from .client import complete

INTENTS = ("refund", "billing", "shipping", "technical", "account", "other")
# Longer tickets are pasted logs or threads; the first part carries the request and keeps the key stable.
MAX_MESSAGE_CHARS = 4000

SYSTEM_PROMPT = """\
You triage customer support messages for an online shop. Read the customer's message and answer with \
exactly one JSON object and nothing else: {"intent": <intent>, "needs_human": <true|false>}.

intent, the one thing the customer wants first:
- "refund": money back for an order, a return, a cancelled or duplicate purchase
- "billing": charges, invoices, payment methods, subscriptions (but not asking for money back)
- "shipping": where a parcel is, delivery dates, couriers, tracking, damaged or missing deliveries
- "technical": the app or site errors, crashes, freezes or does not load
- "account": signing in, passwords, usernames, two-factor, account settings
- "other": anything else (praise, product questions, partnerships)

needs_human is true only when a person must step in: legal threats or lawyers, fraud, chargebacks, \
stolen or hacked accounts, a demand for a manager, or an openly furious or "unacceptable" tone. \
Otherwise it is false. Never add keys, prose or code fences."""


class TriageError(ValueError):
    """The model's answer was not the JSON object the contract asks for."""


def parse_answer(text: str) -> dict[str, Any]:
    """Parse the model's reply strictly: exactly ``{"intent": <known intent>, "needs_human": <bool>}``.

    Code fences, prose and extra keys are refused rather than repaired: a model that drifts from the
    contract should fail the suite, not be papered over with a guess.
    """
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


def clean_message(message: object) -> str:
    """The ticket text as sent to the model: a non-empty string, whitespace-trimmed, length-capped."""
    if not isinstance(message, str):
        raise TypeError(f"a support message must be text, not {type(message).__name__}")
    text = message.strip()
    if not text:
        raise ValueError("a support message must not be empty")
    return text[:MAX_MESSAGE_CHARS]


def triage(message: str, *, client: httpx.Client | None = None) -> dict[str, Any]:
    """Classify a support message: ``{"intent": str, "needs_human": bool}``."""
    return parse_answer(complete(SYSTEM_PROMPT, clean_message(message), client=client))
