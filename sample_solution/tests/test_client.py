"""The client names a reply that holds no answer (a refusal, a tool call, a cut or empty answer) instead of
passing it on to the parser as if it were text: a model that drifts fails loudly, in the provider's shape."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from support_triage_agent import client

ANSWER = '{"intent": "refund", "needs_human": false}'


def _reply(text: str | None, *, stop: str = "stop", refusal: str | None = None, tool: bool = False) -> dict:
    if client.PROVIDER == "anthropic":
        blocks: list[dict[str, Any]] = [] if text is None else [{"type": "text", "text": text}]
        if tool:
            use = {"type": "tool_use", "id": "t1", "name": "classify_ticket", "input": json.loads(ANSWER)}
            blocks = [use]
        reason = {"length": "max_tokens", "refusal": "refusal"}.get(stop, "tool_use" if tool else "end_turn")
        if refusal:
            blocks, reason = [{"type": "text", "text": refusal}], "refusal"
        return {"type": "message", "role": "assistant", "content": blocks, "stop_reason": reason}
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": refusal}
    if tool:
        call = {"id": "c1", "type": "function", "function": {"name": "classify_ticket", "arguments": ANSWER}}
        message.update(content=None, tool_calls=[call])
        stop = "tool_calls"
    return {"choices": [{"index": 0, "message": message, "finish_reason": stop}]}


def _complete(body: dict) -> str:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    with httpx.Client(transport=transport) as http:
        return client.complete("system", "I want my money back", client=http)


def test_a_plain_answer_is_returned_as_text() -> None:
    assert _complete(_reply(ANSWER)) == ANSWER


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (_reply(None, refusal="I'm sorry, but I can't help with that request."), "refused"),
        (_reply(None, tool=True), "called a tool (classify_ticket)"),
        (_reply(ANSWER[:20], stop="length"), "cut at the token limit"),
        (_reply(""), "no answer text"),
        (_reply(None), "no answer text"),
    ],
    ids=["refusal", "tool-call", "truncated", "empty", "no-content"],
)
def test_a_reply_without_a_usable_answer_is_a_model_error_naming_it(body: dict, named: str) -> None:
    with pytest.raises(client.ModelError, match=named.replace("(", r"\(").replace(")", r"\)")):
        _complete(body)
