"""What a recorded (or freshly re-recorded) exchange says: the answer's text, its tool calls and its tokens.

Both wire formats, streamed and not: OpenAI chat completions (`choices[0].message`, `chat.completion.chunk`
deltas) and Anthropic messages (`content` blocks, `content_block_delta` events). Reads the grader's parsed
`Interaction`s (grader/tapes.py), so any recorder's tape format the grader can load works.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from grader.tapes import Interaction

__all__ = ["Exchange", "read_exchange", "verdict_of"]

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(.*?)\n?```\s*$", re.S)


@dataclass(frozen=True)
class Exchange:
    text: str | None  # the answer's text (None: no text at all, e.g. only a tool call)
    tools: tuple[str, ...]  # names of the tools the answer called, in order
    tokens: int | None  # input + output tokens, when the answer says
    served_model: str | None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage_tokens(usage: Any) -> int | None:
    if not isinstance(usage, dict):
        return None
    total = _int(usage.get("total_tokens"))
    if total is not None:
        return total
    parts = [
        _int(usage.get(k))
        for k in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")
        if k in usage
    ]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def _from_body(body: dict[str, Any]) -> tuple[str | None, list[str], int | None]:
    tools: list[str] = []
    texts: list[str] = []
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message") or {}
        if isinstance(message.get("content"), str):
            texts.append(message["content"])
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                tools.append(str(call["function"].get("name", "")))
    content = body.get("content")
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use":
                tools.append(str(block.get("name", "")))
    return ("".join(texts) if texts else None), tools, _usage_tokens(body.get("usage"))


def _events(text: str) -> Iterable[dict[str, Any]]:
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if not data or data == "[DONE]":
            continue
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def _from_stream(text: str) -> tuple[str | None, list[str], int | None]:
    texts: list[str] = []
    tools: list[str] = []
    tokens: dict[str, int] = {}
    for event in _events(text):
        for choice in event.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                texts.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                name = (call.get("function") or {}).get("name") if isinstance(call, dict) else None
                if isinstance(name, str) and name:
                    tools.append(name)
        kind = event.get("type")
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                tools.append(str(block.get("name", "")))
            elif isinstance(block.get("text"), str):
                texts.append(block["text"])
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                texts.append(delta["text"])
        # OpenAI: a final chunk's usage; Anthropic: message_start's input, message_delta's output tokens.
        usage = event.get("usage") or (event.get("message") or {}).get("usage")
        if isinstance(usage, dict):
            for key in (
                "prompt_tokens",
                "completion_tokens",
                "input_tokens",
                "output_tokens",
                "total_tokens",
            ):
                value = _int(usage.get(key))
                if value is not None:
                    tokens[key] = value
    total = tokens.get("total_tokens")
    if total is None and tokens:
        total = sum(v for k, v in tokens.items() if k != "total_tokens")
    return ("".join(texts) if texts else None), tools, total


def read_exchange(interaction: Interaction) -> Exchange:
    """The answer an exchange holds (from its JSON body, else its event stream)."""
    if isinstance(interaction.response_body, dict):
        text, tools, tokens = _from_body(interaction.response_body)
    elif interaction.response_text:
        text, tools, tokens = _from_stream(interaction.response_text)
    else:
        text, tools, tokens = None, [], None
    return Exchange(text, tuple(tools), tokens, interaction.served_model)


def verdict_of(text: str | None) -> dict[str, Any] | None:
    """The `{"intent", "needs_human"}` a recorded answer says (a bare or fenced JSON object), else None.

    This reads the *recording*, to show what the model said back then; it is deliberately not the agent's
    parser, whose output the arms judge.
    """
    if not text:
        return None
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        value = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("intent"), str):
        return None
    if not isinstance(value.get("needs_human"), bool):
        return None
    return {"intent": value["intent"], "needs_human": value["needs_human"]}
