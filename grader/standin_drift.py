"""The drift a stand-in profile injects, decided per request and applied to either wire format.

Which drift an answer gets is a pure function of the profile's seed, the request (the same digest the
stand-in derives ids from) and how many times that request was seen before: the same seed and the same
requests give the same decisions whatever order distinct requests arrive in, and a retried request rolls
again. Every answer carries its ground truth in the `x-standin-truth` header (and, when asked, one JSON line
in a truth log), which the grader reads and a candidate's code has no reason to.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.standin import (
    _anthropic_error,
    _anthropic_message,
    _anthropic_stream,
    _last_user_text,
    _max_tokens,
    _messages,
    _openai_completion,
    _openai_error,
    _openai_stream,
    _Reply,
    _tokens,
    classify,
    system_prompts,
)
from grader.standin_profile import Drift, Profile

if TYPE_CHECKING:
    from grader.standin import _Handler

__all__ = ["TRUTH_HEADER", "Drifter"]

TRUTH_HEADER = "x-standin-truth"
# Chunk sizes of a split stream: small and uneven, so boundaries fall inside words and JSON tokens.
_AWKWARD = (1, 4, 2, 7, 3, 5)
_FIELD_EDITS = ("extra_field", "renamed_field", "label_case", "label_synonym")
_ERRORS = {
    ("openai", 429): (
        "Rate limit reached for requests per min (RPM): Limit 500, Used 500, Requested 1.",
        "requests",
        "rate_limit_exceeded",
    ),
    ("openai", 500): (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
    ),
    ("anthropic", 429): (
        "Number of requests has exceeded your per-minute rate limit.",
        "rate_limit_error",
        None,
    ),
    ("anthropic", 500): ("Internal server error", "api_error", None),
}


class Drifter:
    """Answers for a server started with a profile (the stand-in's hook calls `answer`)."""

    def __init__(
        self,
        profile: Profile,
        truth_log: Path | None = None,
        *,
        sink: Callable[[dict[str, object]], None] | None = None,
        header: bool = True,
    ) -> None:
        """``truth_log``: a file each answer's truth line is appended to; ``sink``: called with each line
        instead (the drift probe's stand-in writes to a file it opened before giving up root);
        ``header=False``: no `x-standin-truth` header (the probe's runs must not read the truth)."""
        self.profile = profile
        self._truth_log = truth_log
        self._sink = sink
        self._header = header
        self._lock = threading.Lock()
        self._seen: dict[bytes, int] = {}
        self._turn = profile.seed  # where `order: rotate` starts (taken modulo the number of kinds)

    def choose(self, digest: bytes, applies: Callable[[Drift], bool]) -> Drift | None:
        if self.profile.order == "rotate":
            return self._next_in_turn(applies)
        with self._lock:
            occurrence = self._seen.get(digest, 0)
            self._seen[digest] = occurrence + 1
        roll = hashlib.sha256(b"%d\n%s\n%d" % (self.profile.seed, digest, occurrence)).digest()
        point = int.from_bytes(roll[:8], "big") / 2**64
        edge = 0.0
        for drift in self.profile.drifts:
            if drift.rate > 0 and applies(drift):
                edge += drift.rate
                if point < edge:
                    return drift
        return None

    def _next_in_turn(self, applies: Callable[[Drift], bool]) -> Drift | None:
        """``order: rotate``: the next kind in turn that applies to this answer (the turn moves past it)."""
        kinds = [d for d in self.profile.drifts if d.rate > 0]
        with self._lock:
            for step in range(len(kinds)):
                at = (self._turn + step) % len(kinds)
                if applies(kinds[at]):
                    self._turn = at + 1
                    return kinds[at]
        return None

    def answer(
        self, handler: _Handler, provider: str, path: str, body: dict[str, Any], reply: _Reply
    ) -> None:
        truth = classify(_last_user_text(_messages(body)), self.profile.rules)
        stream = body.get("stream") is True
        if provider in self.profile.served_model:
            reply = replace(reply, served=self.profile.served_model[provider])
        drift = self.choose(reply.digest, lambda d: _applies(d, truth, stream))
        kind = drift.kind if drift else "none"
        headers = handler._common_headers(
            provider, reply.digest, reply.served if provider == "openai" else None
        )
        if self._header:
            headers[TRUTH_HEADER] = json.dumps({**truth, "drift": kind})
        status = int(kind.removeprefix("http_")) if kind.startswith("http_") else 200
        self._record(provider, path, stream, reply.served, truth, kind, status, _digests(body))
        if drift is not None and status != 200:
            _send_error(handler, provider, status, drift.options["retry_after"], headers)
            return
        if drift is None:
            pass
        elif kind == "slow":
            time.sleep(float(drift.options["delay_seconds"]))
        elif kind == "refusal":
            reply = replace(reply, pieces=_tokens(drift.options["text"]), truncated=False)
        elif kind == "tool_call":
            reply = replace(reply, pieces=_tokens(json.dumps(truth)), truncated=False)
        else:
            reply = _rewrite_text(reply, drift, truth, _limit(body, provider))
        _send(handler, provider, body, reply, kind, drift, headers, truth)

    def _record(
        self,
        provider: str,
        path: str,
        stream: bool,
        model: str,
        truth: dict[str, object],
        kind: str,
        status: int,
        system: list[str],
    ) -> None:
        if self._truth_log is None and self._sink is None:
            return
        line = {"provider": provider, "path": path, "stream": stream, "model": model, **truth}
        line.update(drift=kind, status=status, system=system)
        with self._lock:
            if self._sink is not None:
                self._sink(line)
                return
            assert self._truth_log is not None
            with self._truth_log.open("a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")


def _digests(body: dict[str, Any]) -> list[str]:
    """A digest of each system prompt the request carries: what the agent sends live, for loud-miss to hold
    against what its tapes stored (red team 6, H6), without the prompt's text in the grader's logs."""
    return [hashlib.sha256(text.encode("utf-8")).hexdigest()[:16] for text in system_prompts(body)]


def _applies(drift: Drift, truth: dict[str, object], stream: bool) -> bool:
    if drift.kind == "split_stream":
        return stream
    if drift.kind == "label_synonym":
        return truth["intent"] in drift.options["synonyms"]
    if drift.kind == "renamed_field":
        return any(name in truth for name in drift.options["renames"])
    return True


def _limit(body: dict[str, Any], provider: str) -> int | None:
    if provider == "openai":
        return _max_tokens(body, "max_completion_tokens", "max_tokens")
    return _max_tokens(body, "max_tokens", required=True)


def _edited(truth: dict[str, object], drift: Drift) -> dict[str, object]:
    answer = dict(truth)
    options = drift.options
    if drift.kind == "extra_field":
        answer.update(options["fields"])
    elif drift.kind == "renamed_field":
        answer = {options["renames"].get(k, k): v for k, v in answer.items()}
    elif drift.kind == "label_case":
        label = str(answer["intent"])
        answer["intent"] = label.upper() if options["style"] == "upper" else label.title()
    elif drift.kind == "label_synonym":
        answer["intent"] = options["synonyms"][answer["intent"]]
    return answer


def _rewrite_text(reply: _Reply, drift: Drift, truth: dict[str, object], limit: int | None) -> _Reply:
    """The reply with its content drifted; the request's max_tokens still cuts it as a real service would."""
    kind, options = drift.kind, drift.options
    text = json.dumps(_edited(truth, drift) if kind in _FIELD_EDITS else truth)
    if kind == "code_fence":
        text = f"```{options['language']}\n{text}\n```"
    elif kind == "prose_before":
        text = f"{options['text']}\n\n{text}"
    elif kind == "prose_after":
        text = f"{text}\n\n{options['text']}"
    pieces = [] if kind == "empty" else _tokens(text)
    truncated = False
    if kind == "truncated" and len(pieces) > 1:
        pieces = pieces[: max(1, min(len(pieces) - 1, int(len(pieces) * options["keep"])))]
        truncated = True
    if limit is not None and limit < len(pieces):
        pieces, truncated = pieces[:limit], True
    if kind == "split_stream":
        pieces = _awkward("".join(pieces))
    return replace(reply, pieces=pieces, truncated=truncated)


def _awkward(text: str) -> list[str]:
    pieces, start, i = [], 0, 0
    while start < len(text):
        size = _AWKWARD[i % len(_AWKWARD)]
        pieces.append(text[start : start + size])
        start, i = start + size, i + 1
    return pieces


def _tool_name(body: dict[str, Any], provider: str, default: str) -> str:
    tools = body.get("tools")
    first = tools[0] if isinstance(tools, list) and tools and isinstance(tools[0], dict) else {}
    name = first.get("function", {}).get("name") if provider == "openai" else first.get("name")
    return name if isinstance(name, str) and name else default


def _send_error(
    handler: _Handler, provider: str, status: int, retry_after: int | None, headers: dict[str, str]
) -> None:
    message, kind, code = _ERRORS[(provider, status)]
    if retry_after is not None:
        headers["retry-after"] = str(retry_after)
    if provider == "openai":
        body = _openai_error(message, kind, code)
    else:
        body = _anthropic_error(message, kind, headers["request-id"])
    handler._send_json(status, body, headers)


def _send(
    handler: _Handler,
    provider: str,
    body: dict[str, Any],
    reply: _Reply,
    kind: str,
    drift: Drift | None,
    headers: dict[str, str],
    truth: dict[str, object],
) -> None:
    tool = None
    if kind == "tool_call":
        assert drift is not None
        tool = {
            "id": ("call_" if provider == "openai" else "toolu_01") + reply.ident("tool", 24),
            "name": _tool_name(body, provider, drift.options["tool_name"]),
            "input": truth,
        }
    if body.get("stream") is not True:
        handler._send_json(200, _whole(provider, reply, kind, tool), headers)
        return
    if provider == "openai":
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        events = _openai_stream(reply, usage)
    else:
        events = _anthropic_stream(reply)
    if kind in ("refusal", "tool_call"):
        events = _rewrite_events(events, lambda data: _edit_event(provider, kind, tool, data))
    if kind == "split_stream":
        events = _fragments(events)
    handler._send_stream(events, headers)


def _whole(provider: str, reply: _Reply, kind: str, tool: dict[str, Any] | None) -> dict[str, Any]:
    if provider == "openai":
        data = _openai_completion(reply)
        choice = data["choices"][0]
        if kind == "refusal":
            choice["message"].update(content=None, refusal=reply.content)
        elif tool is not None:
            call = {"id": tool["id"], "type": "function"}
            call["function"] = {"name": tool["name"], "arguments": reply.content}
            choice["message"].update(content=None, tool_calls=[call])
            choice["finish_reason"] = "tool_calls"
        return data
    data = _anthropic_message(reply)
    if kind == "empty":
        data["content"] = []
    elif kind == "refusal":
        data["stop_reason"] = "refusal"
    elif tool is not None:
        data["content"] = [{"type": "tool_use", **tool}]
        data["stop_reason"] = "tool_use"
    return data


def _edit_event(
    provider: str, kind: str, tool: dict[str, Any] | None, data: dict[str, Any]
) -> dict[str, Any]:
    """One streamed event as the drift changes it (only refusals and tool calls change the event shapes)."""
    if provider == "openai":
        for choice in data.get("choices", ()):
            delta = choice["delta"]
            if kind == "refusal" and "role" in delta:
                delta.update(content=None, refusal="")
            elif kind == "refusal" and "content" in delta:
                delta["refusal"] = delta.pop("content")
            elif tool is not None and "role" in delta:
                head = {"name": tool["name"], "arguments": ""}
                delta.update(
                    content=None,
                    tool_calls=[{"index": 0, "id": tool["id"], "type": "function", "function": head}],
                )
            elif tool is not None and "content" in delta:
                delta["tool_calls"] = [{"index": 0, "function": {"arguments": delta.pop("content")}}]
            elif tool is not None and choice["finish_reason"]:
                choice["finish_reason"] = "tool_calls"
        return data
    name = data.get("type")
    if name == "message_delta" and kind == "refusal":
        data["delta"]["stop_reason"] = "refusal"
    elif tool is not None and name == "content_block_start":
        data["content_block"] = {"type": "tool_use", "id": tool["id"], "name": tool["name"], "input": {}}
    elif tool is not None and name == "content_block_delta":
        data["delta"] = {"type": "input_json_delta", "partial_json": data["delta"]["text"]}
    elif tool is not None and name == "message_delta":
        data["delta"]["stop_reason"] = "tool_use"
    return data


def _rewrite_events(events: Iterator[str], edit: Callable[[dict[str, Any]], dict[str, Any]]) -> Iterator[str]:
    for event in events:
        lines = event.split("\n")
        for i, line in enumerate(lines):
            if line.startswith("data: {"):
                lines[i] = "data: " + json.dumps(edit(json.loads(line[6:])))
        yield "\n".join(lines)


def _fragments(events: Iterator[str]) -> Iterator[str]:
    """Each event in pieces (each its own HTTP chunk): inside `data:`, mid-JSON, between the two newlines."""
    for event in events:
        cuts = sorted({0, 3, len(event) // 2, len(event) - 1, len(event)})
        for start, end in itertools.pairwise(cuts):
            if end > start:
                yield event[start:end]
