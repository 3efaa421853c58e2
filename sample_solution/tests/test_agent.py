"""The agent's own logic, without any tape: input cleaning and strict parsing of the model's answer."""

from __future__ import annotations

import pytest

from support_triage_agent.agent import MAX_MESSAGE_CHARS, TriageError, clean_message, parse_answer


def test_parse_accepts_exact_contract() -> None:
    assert parse_answer('{"intent": "refund", "needs_human": false}') == {
        "intent": "refund",
        "needs_human": False,
    }


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        ("Sure! The intent is refund.", "not JSON"),
        ('```json\n{"intent": "refund", "needs_human": false}\n```', "not JSON"),
        ('{"intent": "refund"}', "exactly the keys"),
        ('{"intent": "refund", "needs_human": false, "confidence": 0.9}', "exactly the keys"),
        ('{"intent": "returns", "needs_human": false}', "unknown intent"),
        ('{"intent": "refund", "needs_human": "no"}', "non-boolean"),
        ('["refund", false]', "exactly the keys"),
    ],
)
def test_parse_refuses_anything_else(answer: str, complaint: str) -> None:
    with pytest.raises(TriageError, match=complaint):
        parse_answer(answer)


def test_clean_message_trims_and_caps() -> None:
    assert clean_message("  where is my parcel?\n") == "where is my parcel?"
    assert len(clean_message("x" * (MAX_MESSAGE_CHARS + 50))) == MAX_MESSAGE_CHARS


@pytest.mark.parametrize("bad", ["", "   \n", None, 42])
def test_clean_message_refuses_empty_or_non_text(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        clean_message(bad)
