"""The cassette layer's partial replay (CASSETTE_REPLAY_UNTIL) and tape folder override (CASSETTE_DIR), in
process: a baked ``cassette.py`` with ``httpx.MockTransport`` as the endpoint. The end-to-end runs against the
real stand-in are in test_replay_until.py (make, the CLI) and test_sdk_compat.py (the official SDKs, httpx2).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.helpers.bake import bake

URL = "https://api.example.test/v1/chat/completions"
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
SSE = (
    'data: {"choices":[{"delta":{"content":"Hel"}}],"model":"gpt-4o-mini-2024-07-18"}\n\n'
    'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'
    "data: [DONE]\n\n"
)


@pytest.fixture(scope="module")
def layer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    project = bake(tmp_path_factory.mktemp("partial"), project_name="Partial Probe")
    sys.path.insert(0, str(project))
    try:
        yield importlib.import_module("partial_probe.cassette")
    finally:
        sys.path.remove(str(project))


@pytest.fixture(autouse=True)
def _clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASSETTE_MISS_LOG", str(tmp_path / "misses.jsonl"))
    for name in ("CASSETTE_MODE", "CASSETTE_USED_LOG", "CASSETTE_DIR", "CASSETTE_REPLAY_UNTIL"):
        monkeypatch.delenv(name, raising=False)


class Upstream:
    """A fake endpoint that counts calls and echoes what it was sent."""

    def __init__(self, sse: bool = False) -> None:
        self.calls = 0
        self.sse = sse

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.sse:
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=SSE)
        return httpx.Response(200, json={"model": "m", "echo_body": json.loads(request.content)})


def _ask(transport: object, text: str) -> httpx.Response:
    with httpx.Client(transport=transport) as client:  # type: ignore[arg-type]
        return client.post(URL, json={**BODY, "messages": [{"role": "user", "content": text}]})


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def committed(layer: ModuleType, tmp_path: Path) -> Path:
    """A recording of two questions, with its chain: the folder partial replay must never write to."""
    upstream = Upstream()
    transport = layer.CassetteTransport(
        tmp_path / "tapes", mode="record", inner=httpx.MockTransport(upstream)
    )
    for text in ("alpha", "beta"):
        _ask(transport, text).raise_for_status()
    return tmp_path / "tapes"


@pytest.fixture
def tally(layer: ModuleType, monkeypatch: pytest.MonkeyPatch) -> object:
    """A fresh count: partial replay numbers the calls of the whole process, and these tests share one."""
    fresh = layer._Tally()
    monkeypatch.setattr(layer, "_TALLY", fresh)
    return fresh


def test_replay_until_serves_the_first_calls_from_tape_and_records_the_rest_elsewhere(
    layer: ModuleType, committed: Path, tmp_path: Path, tally, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _snapshot(committed)
    scratch = tmp_path / "refresh"
    monkeypatch.setenv("CASSETTE_REPLAY_UNTIL", "2")
    monkeypatch.setenv("CASSETTE_DIR", str(scratch))
    upstream = Upstream()
    sync = layer.CassetteTransport(committed, inner=httpx.MockTransport(upstream))
    assert _ask(sync, "alpha").status_code == 200 and _ask(sync, "beta").status_code == 200
    assert upstream.calls == 0, "calls 1..N come from the tapes"

    async def live_async() -> httpx.Response:
        transport = layer.AsyncCassetteTransport(committed, inner=httpx.MockTransport(upstream))
        async with httpx.AsyncClient(transport=transport) as client:
            return await client.post(URL, json={**BODY, "messages": [{"role": "user", "content": "gamma"}]})

    # Call 3 goes live through another transport: the count is the process's, not one client's.
    assert asyncio.run(live_async()).json()["echo_body"]["messages"][0]["content"] == "gamma"
    assert _ask(sync, "alpha").json()["echo_body"]["messages"][0]["content"] == "alpha"  # recorded, now live
    assert upstream.calls == 2
    assert tally.line() == "model calls: 4 (2 from tape, 2 live), first live call 3"
    assert _snapshot(committed) == before, "the committed tapes and chain are untouched"
    assert len(list(scratch.glob("*.json"))) == 2
    assert layer.main(["verify", "--dir", str(scratch)]) == 0, "the refresh folder has its own chain"


def test_a_miss_within_the_replayed_calls_is_loud_and_counted(
    layer: ModuleType, committed: Path, tmp_path: Path, tally, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASSETTE_REPLAY_UNTIL", "1")
    monkeypatch.setenv("CASSETTE_DIR", str(tmp_path / "refresh"))
    upstream = Upstream()
    transport = layer.CassetteTransport(committed, inner=httpx.MockTransport(upstream))
    with pytest.raises(layer.CassetteMiss, match=str(committed)):
        _ask(transport, "never recorded")
    assert upstream.calls == 0
    assert _ask(transport, "never recorded").status_code == 200  # beyond N a miss is not a miss: it goes live
    assert tally.line() == "model calls: 2 (0 from tape, 1 live, 1 missed), first live call 2"


def test_replay_until_with_no_live_call_says_none(
    layer: ModuleType, committed: Path, tmp_path: Path, tally, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CASSETTE_REPLAY_UNTIL", "5")
    monkeypatch.setenv("CASSETTE_DIR", str(tmp_path / "refresh"))
    transport = layer.CassetteTransport(committed, inner=httpx.MockTransport(Upstream()))
    _ask(transport, "alpha").raise_for_status()
    assert tally.line() == "model calls: 1 (1 from tape, 0 live), first live call none"
    assert not (tmp_path / "refresh").exists(), "nothing live, nothing written"


@pytest.mark.parametrize(
    ("until", "folder", "complaint"),
    [
        ("two", "refresh", "not a whole number"),
        ("-1", "refresh", "not a whole number"),
        ("3", "", "needs CASSETTE_DIR"),
        ("3", "tapes", "never overwritten"),
    ],
)
def test_replay_until_is_refused_when_it_could_touch_the_recording(
    layer: ModuleType,
    committed: Path,
    tmp_path: Path,
    tally,
    monkeypatch: pytest.MonkeyPatch,
    until: str,
    folder: str,
    complaint: str,
) -> None:
    monkeypatch.setenv("CASSETTE_REPLAY_UNTIL", until)
    monkeypatch.setenv("CASSETTE_DIR", str(tmp_path / folder) if folder else "")
    with pytest.raises(ValueError, match=complaint):
        layer.CassetteTransport(committed)


def test_cassette_dir_moves_replay_and_record_but_not_an_explicit_mode(
    layer: ModuleType, committed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _snapshot(committed)
    scratch = tmp_path / "refresh"
    monkeypatch.setenv("CASSETTE_DIR", str(scratch))
    monkeypatch.setenv("CASSETTE_MODE", "record")
    upstream = Upstream(sse=True)
    _ask(layer.CassetteTransport(committed, inner=httpx.MockTransport(upstream)), "alpha").raise_for_status()
    assert _snapshot(committed) == before and len(list(scratch.glob("*.json"))) == 1
    assert layer.main(["verify", "--dir", str(scratch)]) == 0

    monkeypatch.setenv("CASSETTE_MODE", "replay")
    replayed = _ask(layer.CassetteTransport(committed), "alpha")
    assert replayed.text == SSE and upstream.calls == 1, "replayed from the refresh folder, as a stream"
    with pytest.raises(layer.CassetteMiss, match=str(scratch)):
        _ask(layer.CassetteTransport(committed), "beta")  # recorded in cassettes/ only
    assert _ask(layer.CassetteTransport(committed, mode="replay"), "beta").status_code == 200
