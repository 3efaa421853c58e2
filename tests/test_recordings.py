"""Hand-rolled recordings are read by meaning: any names for request, response and metadata, any layout.

The shapes below are the ones independent authors chose (grader/selftest/independent/): each test writes a
small repository the way they did and checks what the tape reader and the manifest's discovery find.
"""

from __future__ import annotations

import json
from pathlib import Path

from grader.manifest import read_manifest
from grader.tapes import load_tapes

OPENAI_BODY = {
    "id": "chatcmpl-1",
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [{"message": {"content": "{}"}}],
}
REQUEST = {"model": "gpt-4o-mini", "temperature": 0, "messages": [{"role": "user", "content": "hi"}]}


def _write(root: Path, rel: str, data: object, *, lines: bool = False) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if lines:
        path.write_text("".join(json.dumps(d) + "\n" for d in data), encoding="utf-8")  # type: ignore[union-attr]
    else:
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def test_flat_fields_beside_the_bodies_are_read_with_where_they_were_found(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "tapes/gpt-4o-mini/3aeb.json",
        {
            "recorded_on": "2026-12-01T13:57:06Z",
            "request_url": "https://api.openai.com/v1/chat/completions",
            "requested_model": "gpt-4o-mini",
            "response_model": "gpt-4o-mini-2024-07-18",
            "request_body": REQUEST,
            "status": 200,
            "response_body": OPENAI_BODY,
        },
    )
    manifest = read_manifest(tmp_path)
    assert manifest.cassette_dir == Path("tapes/gpt-4o-mini")
    (tape,) = load_tapes(tmp_path, manifest.cassette_dir)
    assert (tape.format, tape.model, tape.served_model) == ("json", "gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert (tape.endpoint, tape.recorded_at) == ("api.openai.com", "2026-12-01T13:57:06Z")
    assert tape.sources == {
        "recorded_at": "recorded_on",
        "endpoint": "request_url",
        "model": "requested_model",
        "served_model": "response_model",
    }
    assert tape.interactions[0].request_body == REQUEST


def test_a_provenance_block_and_a_stored_event_stream(tmp_path: Path) -> None:
    events = [
        {"event": "message_start", "data": {"message": {"model": "claude-haiku-4-5-20251001"}}},
        {"event": "content_block_delta", "data": {"delta": {"text": "{}"}}},
    ]
    _write(
        tmp_path,
        "tapes/ae17.json",
        {
            "provenance": {
                "recorded_at": "2026-12-01T13:53:46+00:00",
                "endpoint": "https://api.anthropic.com/v1/messages",
            },
            "request": {"method": "POST", "body": {"model": "claude-haiku-4-5", "stream": True}},
            "response": {"status": 200, "events": events},
        },
    )
    (tape,) = load_tapes(tmp_path, read_manifest(tmp_path).cassette_dir)
    assert tape.served_model == "claude-haiku-4-5-20251001"
    assert tape.sources["served_model"] == "response.events[0]"
    assert tape.sources["recorded_at"] == "provenance.recorded_at"
    assert (tape.endpoint, tape.model) == ("api.anthropic.com", "claude-haiku-4-5")


def test_json_lines_records_with_their_own_names(tmp_path: Path) -> None:
    record = {
        "key": "abc",
        "when": "2026-12-01T13:53:44Z",
        "host": "api.openai.com",
        "asked_model": "gpt-4.1-mini",
        "req_json": REQUEST,
        "resp_json": OPENAI_BODY,
    }
    _write(tmp_path, "tests/_tapes/interactions.jsonl", [record, {**record, "key": "def"}], lines=True)
    _write(tmp_path, "data/tickets.jsonl", [{"message": "hi", "intent": "other"}], lines=True)
    manifest = read_manifest(tmp_path)
    assert manifest.cassette_dir == Path("tests/_tapes")
    (tape,) = load_tapes(tmp_path, manifest.cassette_dir)
    assert len(tape.interactions) == 2
    assert tape.sources == {
        "recorded_at": "when",
        "endpoint": "host",
        "model": "asked_model",
        "served_model": "resp_json.body.model",
    }
    assert tape.served_model == "gpt-4o-mini-2024-07-18" and tape.endpoint == "api.openai.com"


def test_a_map_of_records_by_key_and_a_method_before_the_url(tmp_path: Path) -> None:
    entry = {
        "meta": {"endpoint": "POST https://api.openai.com/v1/chat/completions", "recorded_at": "2026-12-01"},
        "request": REQUEST,
        "response": {"status": 200, "body": OPENAI_BODY},
    }
    _write(tmp_path, "tapes/tapes.json", {"k1": entry, "k2": entry})
    (tape,) = load_tapes(tmp_path, read_manifest(tmp_path).cassette_dir)
    assert len(tape.interactions) == 2
    assert (tape.endpoint, tape.recorded_at, tape.model) == (
        "api.openai.com",
        "2026-12-01T00:00:00Z",
        "gpt-4o-mini",
    )


def test_files_that_are_not_recordings_are_not_tapes(tmp_path: Path) -> None:
    _write(tmp_path, "config/settings.json", {"model": "gpt-4o-mini", "temperature": 0})
    _write(tmp_path, "data/tickets.json", [{"request": "refund please", "label": "refund"}])
    assert read_manifest(tmp_path).cassette_dir is None
