"""The agent against its recorded tapes: one test per labelled ticket in data/tickets.jsonl.

Before `make record` has run these fail loudly with a CassetteMiss naming the tape they need.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support_triage_agent.agent import INTENTS, triage

TICKETS = Path(__file__).resolve().parent.parent / "data" / "tickets.jsonl"
CASES = [json.loads(line) for line in TICKETS.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("ticket", CASES, ids=[f"{i:02d}-{c['intent']}" for i, c in enumerate(CASES, 1)])
def test_triage_matches_label(ticket: dict) -> None:
    result = triage(ticket["message"])
    assert result["intent"] in INTENTS
    assert result == {"intent": ticket["intent"], "needs_human": ticket["needs_human"]}
