"""The baked cassette layer under the REAL official SDKs (openai, anthropic; built on httpx2) and plain httpx.

Each case records against the stand-in server, stops the server, then replays: the replayed content must be
identical, sync and async, streamed and not. A miss through an SDK must leave a CassetteMiss in the
exception chain and a line in the miss ledger.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from tests.helpers.bake import bake, standin

SYSTEM = "Classify the support message. Answer with JSON only."
TICKET = "My package never arrived and I am furious."
EXPECTED = {"intent": "shipping", "needs_human": True}
PLACEHOLDER_KEY = "replay-needs-no-key"
RECORD_KEY = "sk-sdk-compat-dummy-0123456789"


@pytest.fixture(scope="module")
def cassette(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    project = bake(tmp_path_factory.mktemp("sdk"), project_name="SDK Probe")
    sys.path.insert(0, str(project))
    try:
        yield importlib.import_module("sdk_probe.cassette")
    finally:
        sys.path.remove(str(project))


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ledger = tmp_path / "misses.jsonl"
    monkeypatch.setenv("CASSETTE_MISS_LOG", str(ledger))
    monkeypatch.delenv("CASSETTE_MODE", raising=False)
    monkeypatch.delenv("CASSETTE_USED_LOG", raising=False)
    return ledger


def _openai_sync(cas: ModuleType, url: str, tapes: Path, mode: str, key: str, stream: bool, text: str) -> str:
    http = httpx2.Client(transport=cas.CassetteTransport2(tapes, mode=mode))
    with openai.OpenAI(api_key=key, base_url=url, http_client=http, max_retries=0) as client:
        messages: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        if not stream:
            reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages, temperature=0)
            return reply.choices[0].message.content or ""
        chunks = client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, temperature=0, stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


async def _openai_async(
    cas: ModuleType, url: str, tapes: Path, mode: str, key: str, stream: bool, text: str
) -> str:
    http = httpx2.AsyncClient(transport=cas.AsyncCassetteTransport2(tapes, mode=mode))
    async with openai.AsyncOpenAI(api_key=key, base_url=url, http_client=http, max_retries=0) as client:
        messages: Any = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        if not stream:
            reply = await client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, temperature=0
            )
            return reply.choices[0].message.content or ""
        chunks = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, temperature=0, stream=True
        )
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])


def _anthropic_args(text: str) -> dict[str, Any]:
    return {
        "model": "claude-3-5-haiku-latest",
        "max_tokens": 100,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": text}],
    }


def _anthropic_sync(
    cas: ModuleType, url: str, tapes: Path, mode: str, key: str, stream: bool, text: str
) -> str:
    http = httpx2.Client(transport=cas.CassetteTransport2(tapes, mode=mode))
    base = url.removesuffix("/v1")
    with anthropic.Anthropic(api_key=key, base_url=base, http_client=http, max_retries=0) as client:
        if not stream:
            reply = client.messages.create(**_anthropic_args(text))
            return "".join(block.text for block in reply.content if block.type == "text")
        events = client.messages.create(**_anthropic_args(text), stream=True)
        return "".join(
            e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
        )


async def _anthropic_async(
    cas: ModuleType, url: str, tapes: Path, mode: str, key: str, stream: bool, text: str
) -> str:
    http = httpx2.AsyncClient(transport=cas.AsyncCassetteTransport2(tapes, mode=mode))
    base = url.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(
        api_key=key, base_url=base, http_client=http, max_retries=0
    ) as client:
        if not stream:
            reply = await client.messages.create(**_anthropic_args(text))
            return "".join(block.text for block in reply.content if block.type == "text")
        events = await client.messages.create(**_anthropic_args(text), stream=True)
        return "".join(
            [
                e.delta.text
                async for e in events
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            ]
        )


def _httpx_body(text: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "temperature": 0,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
    }
    return {**body, "stream": True} if stream else body


def _sse_content(lines: list[str]) -> str:
    out = []
    for line in lines:
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            choices = json.loads(line[5:])["choices"]
            out.append(choices[0]["delta"].get("content") or "" if choices else "")
    return "".join(out)


def _httpx_sync(cas: ModuleType, url: str, tapes: Path, mode: str, key: str, stream: bool, text: str) -> str:
    with httpx.Client(transport=cas.CassetteTransport(tapes, mode=mode)) as client:
        request = client.build_request(
            "POST",
            f"{url}/chat/completions",
            json=_httpx_body(text, stream),
            headers={"authorization": f"Bearer {key}"},
        )
        response = client.send(request, stream=stream)
        try:
            response.raise_for_status()
            if stream:
                return _sse_content(list(response.iter_lines()))
            return response.read() and response.json()["choices"][0]["message"]["content"]
        finally:
            response.close()


async def _httpx_async(
    cas: ModuleType, url: str, tapes: Path, mode: str, key: str, stream: bool, text: str
) -> str:
    async with httpx.AsyncClient(transport=cas.AsyncCassetteTransport(tapes, mode=mode)) as client:
        request = client.build_request(
            "POST",
            f"{url}/chat/completions",
            json=_httpx_body(text, stream),
            headers={"authorization": f"Bearer {key}"},
        )
        response = await client.send(request, stream=stream)
        try:
            response.raise_for_status()
            if stream:
                return _sse_content([line async for line in response.aiter_lines()])
            await response.aread()
            return response.json()["choices"][0]["message"]["content"]
        finally:
            await response.aclose()


CLIENTS = {
    "openai-sync": _openai_sync,
    "openai-async": _openai_async,
    "anthropic-sync": _anthropic_sync,
    "anthropic-async": _anthropic_async,
    "httpx-sync": _httpx_sync,
    "httpx-async": _httpx_async,
}


def _call(name: str, *args: Any) -> str:
    result = CLIENTS[name](*args)
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_record_then_replay_with_the_server_gone(
    cassette: ModuleType, tmp_path: Path, name: str, stream: bool, _ledger: Path
) -> None:
    tapes = tmp_path / "tapes"
    with standin() as url:
        recorded = _call(name, cassette, url, tapes, "record", RECORD_KEY, stream, TICKET)
    # The server is stopped: anything but a tape would fail to connect.
    replayed = _call(name, cassette, url, tapes, "replay", PLACEHOLDER_KEY, stream, TICKET)
    assert json.loads(recorded) == EXPECTED
    assert replayed == recorded
    [tape] = list(tapes.glob("*.json"))
    data = json.loads(tape.read_text())
    assert ("text" in data["response"]) is stream
    assert RECORD_KEY not in tape.read_text()
    assert not _ledger.exists()


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


@pytest.mark.parametrize("name", ["openai-sync", "openai-async", "anthropic-sync", "anthropic-async"])
def test_a_miss_through_the_sdk_is_in_the_chain_and_the_ledger(
    cassette: ModuleType, tmp_path: Path, name: str, _ledger: Path
) -> None:
    with pytest.raises(Exception) as caught:
        _call(
            name,
            cassette,
            "http://127.0.0.1:9/v1",
            tmp_path / "empty",
            "replay",
            PLACEHOLDER_KEY,
            False,
            TICKET,
        )
    misses = [e for e in _chain(caught.value) if isinstance(e, cassette.CassetteMiss)]
    assert misses, f"no CassetteMiss in the chain of {caught.value!r}"
    assert "make record" in str(misses[0])
    [entry] = [json.loads(line) for line in _ledger.read_text().splitlines()]
    assert entry["key"] == misses[0].key
    path = "/v1/messages" if name.startswith("anthropic") else "/v1/chat/completions"
    assert (entry["method"], entry["path"]) == ("POST", path)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", sorted(CLIENTS))
def test_partial_replay_serves_the_first_call_from_tape_and_records_the_next_into_cassette_dir(
    cassette: ModuleType, tmp_path: Path, name: str, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed, scratch, truth = tmp_path / "tapes", tmp_path / "refresh", tmp_path / "truth.jsonl"
    other = "I was charged twice this month."
    with standin("--profile", "baseline", "--truth-log", str(truth)) as url:
        recorded = _call(name, cassette, url, committed, "record", RECORD_KEY, stream, TICKET)
        before = {p.name: p.read_bytes() for p in committed.iterdir()}
        monkeypatch.setattr(cassette, "_TALLY", cassette._Tally())  # partial replay counts per process
        monkeypatch.setenv("CASSETTE_REPLAY_UNTIL", "1")
        monkeypatch.setenv("CASSETTE_DIR", str(scratch))
        # mode=None: the transport follows the environment, as the baked client and the README's SDK use do.
        assert _call(name, cassette, url, committed, None, RECORD_KEY, stream, TICKET) == recorded
        live = _call(name, cassette, url, committed, None, RECORD_KEY, stream, other)
    assert json.loads(live)["intent"] == "billing"
    assert cassette._TALLY.line() == "model calls: 2 (1 from tape, 1 live), first live call 2"
    # The stand-in answered the recording and the one live call, nothing else.
    assert [json.loads(line)["stream"] for line in truth.read_text().splitlines()] == [stream, stream]
    assert {p.name: p.read_bytes() for p in committed.iterdir()} == before
    [tape] = list(scratch.glob("*.json"))
    assert ("text" in json.loads(tape.read_text())["response"]) is stream
    assert RECORD_KEY not in tape.read_text()

    # CASSETTE_DIR alone: replay from the refresh folder, server gone.
    monkeypatch.delenv("CASSETTE_REPLAY_UNTIL")
    assert _call(name, cassette, url, committed, None, PLACEHOLDER_KEY, stream, other) == live
