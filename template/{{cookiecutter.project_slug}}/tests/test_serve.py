"""`make serve` without a socket: the replayer answers a recorded request with its tape and anything else with
a 422 naming the key, and the page shows both. (Sockets stay blocked in replay; the kit's own tests drive
the real server over loopback with the official SDKs and a browser.)
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from {{cookiecutter.package_name}}.agent import SYSTEM_PROMPT, triage
from {{cookiecutter.package_name}}.cassette import CassetteTransport, key_for
from {{cookiecutter.package_name}}.client import request_body
from {{cookiecutter.package_name}}.serve import Replayer, page

TICKET = "My parcel is two weeks late, where is it?"
ANSWER = '{"intent": "shipping", "needs_human": false}'


def _upstream(request: httpx.Request) -> httpx.Response:
    # One body both wire formats can read: OpenAI's choices and Anthropic's content blocks.
    return httpx.Response(
        200,
        json={
            "model": "served-model",
            "choices": [{"message": {"role": "assistant", "content": ANSWER}}],
            "content": [{"type": "text", "text": ANSWER}],
        },
    )


@pytest.fixture
def tapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CASSETTE_MISS_LOG", str(tmp_path / "misses.jsonl"))
    folder = tmp_path / "tapes"
    transport = CassetteTransport(folder, mode="record", inner=httpx.MockTransport(_upstream))
    with httpx.Client(transport=transport) as client:
        assert triage(TICKET, client=client) == {"intent": "shipping", "needs_human": False}
    return folder


def test_recorded_requests_replay_and_anything_else_gets_422_on_the_wire_and_the_page(tapes: Path) -> None:
    [tape] = [json.loads(p.read_text()) for p in tapes.glob("*.json")]
    request = tape["request"]
    reply, key = Replayer(tapes).answer("POST", request["path"], json.dumps(request["body"]).encode())
    assert (reply.status, key) == (200, tape["key"])
    assert json.loads(reply.content) == tape["response"]["body"]

    # Anything else: 422 naming the key and the nearest tape, and nothing written.
    body = {**tape["request"]["body"], "temperature": 1}
    path = tape["request"]["path"]
    reply, key = Replayer(tapes).answer("POST", path, json.dumps(body).encode())
    assert reply.status == 422 and key == key_for(body, path=path)
    error = json.loads(reply.content)["error"]
    assert error["key"] == key and key in error["message"]
    assert error["nearest"]["key"] == tape["key"]
    assert [d.split(":")[0] for d in error["nearest"]["differences"]] == ["temperature"]
    assert not (tapes / f"{key}.json").exists()

    # The page: the recorded ticket with its replayed triage, and a box that shows an unseen one's 422.
    replayer = Replayer(tapes)
    status, html = page(replayer, "http://127.0.0.1:1/v1", None)
    assert status == 200 and TICKET.replace("'", "&#x27;") in html and 'class="intent">shipping<' in html
    assert "<script" not in html and "http://" not in html.replace("http://127.0.0.1:1/v1", "")

    status, html = page(replayer, "http://127.0.0.1:1/v1", TICKET)
    assert status == 200 and 'data-status="200"><h2>200: replayed' in html

    unseen = "Has anyone seen my cat?"
    status, html = page(replayer, "http://127.0.0.1:1/v1", unseen)
    assert status == 422 and 'data-status="422"' in html
    expected = key_for(request_body(SYSTEM_PROMPT, unseen))
    assert f'HTTP 422, cassette miss: key <code class="key">{expected}</code>' in html
