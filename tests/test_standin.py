"""The stand-in model server: real HTTP on loopback, hit with httpx and the real openai/anthropic SDKs."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import anthropic
import httpx
import openai
import pytest

from grader.standin import RULES_PATH, RulesError, classify, load_rules, running, served_model

# Real loopback HTTP is the point of these tests, even where a conftest turns pytest-socket on.
pytestmark = pytest.mark.enable_socket

REPO = Path(__file__).resolve().parent.parent
OPENAI_KEY = {"Authorization": "Bearer sk-test-not-a-real-key-123"}
ANTHROPIC_KEY = {"x-api-key": "sk-ant-test-not-a-real-key-456", "anthropic-version": "2023-06-01"}


def _chat(text: str, **extra: object) -> dict:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], **extra}


def _message(text: str, **extra: object) -> dict:
    return {
        "model": "claude-3-5-haiku-latest",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with running(port=0) as url:
        yield url


@pytest.fixture(scope="module")
def origin(base_url: str) -> str:
    return base_url.removesuffix("/v1")


# --- the rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "intent", "needs_human"),
    [
        ("I want a REFUND for my order", "refund", False),
        ("I was charged twice, give me my money back", "refund", False),  # refund outranks billing
        ("Why is my invoice higher this month?", "billing", False),
        ("My credit card payment failed", "billing", False),
        ("Where is my package? Tracking says nothing", "shipping", False),
        ("The courier never delivered it, this is unacceptable", "shipping", True),
        ("The app won't load since the update", "technical", False),
        ("Checkout is broken and shows an error", "technical", False),
        ("I can't log in, my account was hacked", "account", True),
        ("Reset my password please", "account", False),
        ("Do you sell gift cards?", "other", False),
        ("My LAWYER will hear about this", "other", True),
        ("", "other", False),
    ],
)
def test_classify_follows_the_rules_in_order(text: str, intent: str, needs_human: bool) -> None:
    assert classify(text) == {"intent": intent, "needs_human": needs_human}


def test_typographic_apostrophe_is_not_folded() -> None:
    # Documented in the rules file: substring matching on the text as sent.
    assert classify("the app won’t load")["intent"] == "other"


@pytest.mark.parametrize(
    ("provider", "requested", "served"),
    [
        ("openai", "gpt-4o-mini", "gpt-4o-mini-2024-07-18"),
        ("openai", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13"),
        ("openai", "gpt-3.5-turbo-0613", "gpt-3.5-turbo-0613"),
        ("openai", "my-finetune", "my-finetune-2024-07-18"),
        ("anthropic", "claude-3-5-haiku-latest", "claude-3-5-haiku-20241022"),
        ("anthropic", "claude-3-5-sonnet-20240620", "claude-3-5-sonnet-20240620"),
        ("anthropic", "claude-new-latest", "claude-new-20241022"),
    ],
)
def test_served_model_is_a_dated_snapshot(provider: str, requested: str, served: str) -> None:
    assert served_model(requested, provider) == served


def test_malformed_rules_file_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "rules.yaml"
    bad.write_text("version: 1\nintents: [\n  - oops: {\n")
    with pytest.raises(RulesError, match=rf"{re.escape(str(bad))}:\d+: invalid YAML"):
        load_rules(bad)
    bad.write_text("version: 1\nintents:\n  - intent: refund\n    keywords: []\n")
    with pytest.raises(RulesError, match=r"intents\[0\]\.keywords: expected a non-empty list"):
        load_rules(bad)


def test_rules_given_as_json_answer_as_the_yaml_they_came_from(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    as_json = tmp_path / "rules.json"
    as_json.write_text(json.dumps(yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))))
    assert load_rules(as_json) == load_rules(RULES_PATH)
    as_json.write_text('{"version": 1,\n "intents": [\n')
    with pytest.raises(RulesError, match=rf"{re.escape(str(as_json))}:3: invalid JSON"):
        load_rules(as_json)


def test_rules_option_serves_from_that_file_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {
                "version": 1,
                "intents": [{"intent": "billing", "keywords": ["parcel"]}],
                "default_intent": "other",
                "needs_human": ["lawyer"],
                "served_models": {
                    p: {"fallback_suffix": "-x", "aliases": {}} for p in ("openai", "anthropic")
                },
            }
        )
    )
    proc, url = _start("--rules", str(rules))
    try:
        r = httpx.post(f"{url}/chat/completions", json=_chat("where is my parcel"), headers=OPENAI_KEY)
        assert json.loads(r.json()["choices"][0]["message"]["content"])["intent"] == "billing"
    finally:
        proc.kill()
        proc.communicate(timeout=60)  # a generous deadline: a busy machine is slow, not wrong
    rules.write_text("{")
    bad = subprocess.run(
        [sys.executable, "-m", "grader.standin", "--rules", str(rules)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        f"standin: error: {rules}:1: invalid JSON in the stand-in rules; fix the syntax"
    ]


# --- plain HTTP -----------------------------------------------------------------------------------


def test_openai_completion_shape_and_headers(base_url: str) -> None:
    r = httpx.post(f"{base_url}/chat/completions", json=_chat("refund now, urgent"), headers=OPENAI_KEY)
    assert r.status_code == 200
    body = r.json()
    assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]{29}", body["id"])
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-4o-mini-2024-07-18"
    assert re.fullmatch(r"fp_[0-9a-f]{10}", body["system_fingerprint"])
    assert 1_700_000_000 < body["created"] < 1_800_000_000
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert json.loads(choice["message"]["content"]) == {"intent": "refund", "needs_human": True}
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert r.headers["content-type"] == "application/json"
    assert int(r.headers["content-length"]) == len(r.content)
    assert r.headers["openai-model"] == "gpt-4o-mini-2024-07-18"
    assert r.headers["openai-version"] == "2020-10-01"
    assert r.headers["openai-processing-ms"].isdigit()
    assert re.fullmatch(r"req_[0-9a-f]{32}", r.headers["x-request-id"])


def test_anthropic_message_shape_and_headers(base_url: str) -> None:
    r = httpx.post(f"{base_url}/messages", json=_message("where is my package"), headers=ANTHROPIC_KEY)
    assert r.status_code == 200
    body = r.json()
    assert re.fullmatch(r"msg_01[A-Za-z0-9]{22}", body["id"])
    assert (body["type"], body["role"], body["model"]) == (
        "message",
        "assistant",
        "claude-3-5-haiku-20241022",
    )
    assert body["stop_reason"] == "end_turn"
    assert json.loads(body["content"][0]["text"]) == {"intent": "shipping", "needs_human": False}
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] > 0
    assert r.headers["anthropic-version"] == "2023-06-01"
    assert re.fullmatch(r"req_011C[A-Za-z0-9]{20}", r.headers["request-id"])


def test_last_user_message_decides_and_text_parts_count(base_url: str) -> None:
    payload = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Classify. Mention refund and fraud for no reason."},
            {"role": "user", "content": "I want a refund"},
            {"role": "assistant", "content": "billing?"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Actually my"}, {"type": "text", "text": "PACKAGE"}],
            },
        ],
    }
    r = httpx.post(f"{base_url}/chat/completions", json=payload, headers=OPENAI_KEY)
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {
        "intent": "shipping",
        "needs_human": False,
    }


def test_identical_requests_give_identical_bodies_across_servers(base_url: str) -> None:
    def bodies(url: str) -> list[bytes]:
        return [
            httpx.post(f"{url}/chat/completions", json=_chat("invoice?"), headers=OPENAI_KEY).content,
            httpx.post(
                f"{url}/chat/completions", json=_chat("invoice?", stream=True), headers=OPENAI_KEY
            ).content,
            httpx.post(f"{url}/messages", json=_message("invoice?"), headers=ANTHROPIC_KEY).content,
            httpx.post(
                f"{url}/messages", json=_message("invoice?", stream=True), headers=ANTHROPIC_KEY
            ).content,
        ]

    first = bodies(base_url)
    assert bodies(base_url) == first
    with running(port=0) as other:  # a restarted stand-in re-records the same tapes
        assert bodies(other) == first
    changed = httpx.post(f"{base_url}/chat/completions", json=_chat("invoice!"), headers=OPENAI_KEY).json()
    assert changed["id"] != json.loads(first[0])["id"]


def test_missing_key_is_401_in_each_service_shape(base_url: str) -> None:
    r = httpx.post(f"{base_url}/chat/completions", json=_chat("hi"))
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "API key" in r.json()["error"]["message"]
    r = httpx.post(f"{base_url}/chat/completions", json=_chat("hi"), headers={"Authorization": "Bearer"})
    assert r.status_code == 401
    r = httpx.post(f"{base_url}/messages", json=_message("hi"), headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 401
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "authentication_error"
    # Anthropic also accepts a bearer token.
    r = httpx.post(f"{base_url}/messages", json=_message("hi"), headers=OPENAI_KEY)
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("path", "payload", "fragment"),
    [
        ("/chat/completions", b"{not json", "could not parse the JSON body"),
        ("/chat/completions", b'{"model": "gpt-4o-mini"}', "'messages' must be a non-empty array"),
        ("/chat/completions", b'{"messages": [{"role": "user", "content": "x"}]}', "model parameter"),
        ("/messages", b"[1, 2]", "not valid JSON"),
        ("/messages", b'{"model": "claude-3-5-haiku-latest", "messages": []}', "max_tokens: Field required"),
    ],
)
def test_bad_requests_are_400(base_url: str, path: str, payload: bytes, fragment: str) -> None:
    headers = {**(ANTHROPIC_KEY if path == "/messages" else OPENAI_KEY), "content-type": "application/json"}
    r = httpx.post(f"{base_url}{path}", content=payload, headers=headers)
    assert r.status_code == 400
    assert fragment in r.text


def test_model_name_cannot_inject_headers(base_url: str) -> None:
    payload = {**_chat("refund"), "model": "gpt-4o\r\nx-injected: 1"}
    r = httpx.post(f"{base_url}/chat/completions", json=payload, headers=OPENAI_KEY)
    assert r.status_code == 400 and "x-injected" not in r.headers
    assert "visible ASCII" in r.json()["error"]["message"]


def test_non_ascii_and_lone_surrogates_are_answered(base_url: str) -> None:
    headers = {**OPENAI_KEY, "content-type": "application/json"}
    text = b'"R\\u00fcckerstattung \\ud83d refund"'  # a lone surrogate escape is valid JSON
    payload = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": %s}]}' % text
    r = httpx.post(f"{base_url}/chat/completions", content=payload, headers=headers)
    assert r.status_code == 200
    assert json.loads(r.json()["choices"][0]["message"]["content"])["intent"] == "refund"


def test_unknown_path_is_404(base_url: str, origin: str) -> None:
    r = httpx.post(f"{base_url}/completions", json={}, headers=OPENAI_KEY)
    assert r.status_code == 404
    assert r.json()["error"]["message"] == "Invalid URL (POST /v1/completions)"
    r = httpx.post(f"{origin}/chat/completions", json=_chat("hi"), headers=OPENAI_KEY)  # forgot /v1
    assert r.status_code == 404
    r = httpx.get(f"{base_url}/nothing", headers=ANTHROPIC_KEY)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_max_tokens_truncates_like_the_real_services(base_url: str) -> None:
    body = httpx.post(
        f"{base_url}/chat/completions", json=_chat("refund", max_tokens=3), headers=OPENAI_KEY
    ).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["message"]["content"] == '{"intent'
    body = httpx.post(
        f"{base_url}/messages", json=_message("refund", max_tokens=2), headers=ANTHROPIC_KEY
    ).json()
    assert body["stop_reason"] == "max_tokens"


def test_models_are_listed(base_url: str) -> None:
    ids = [m["id"] for m in httpx.get(f"{base_url}/models", headers=OPENAI_KEY).json()["data"]]
    assert "gpt-4o-mini" in ids
    listing = httpx.get(f"{base_url}/models", headers=ANTHROPIC_KEY).json()
    assert listing["data"][0]["type"] == "model" and listing["has_more"] is False


def test_chunked_request_body_is_read(base_url: str) -> None:
    data = json.dumps(_chat("crash on start")).encode()
    r = httpx.post(
        f"{base_url}/chat/completions",
        content=iter([data[:10], data[10:]]),  # an iterator has no length: httpx sends it chunked
        headers={**OPENAI_KEY, "content-type": "application/json"},
    )
    assert r.status_code == 200
    assert json.loads(r.json()["choices"][0]["message"]["content"])["intent"] == "technical"


@pytest.mark.parametrize(
    ("framing", "anthropic"),
    [("content-length: 67108864", False), ("transfer-encoding: chunked", True)],
    ids=["content-length", "chunked"],
)
def test_a_body_over_the_cap_is_refused_before_it_is_read(origin: str, framing: str, anthropic: bool) -> None:
    """Red team 6: a 1.2 GB body made the drift probe's stand-in hold 2.48 GB. A body declared (or chunked)
    over the cap is answered 413 in the provider's error shape at once, without waiting for it."""
    host, port = urlsplit(origin).hostname, urlsplit(origin).port
    path = "/v1/messages" if anthropic else "/v1/chat/completions"
    key = "x-api-key: k\r\nanthropic-version: 2023-06-01" if anthropic else "authorization: Bearer k"
    head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\n{key}\r\n"
    head += f"content-type: application/json\r\n{framing}\r\n\r\n"
    body = f"{40 * 1024 * 1024:x}\r\n{{".encode() if anthropic else b"{"  # a chunk of 40 MiB, begun
    with socket.create_connection((host, port), timeout=30) as conn:
        conn.sendall(head.encode() + body)
        answer = b""
        while chunk := conn.recv(65536):  # the server closes the connection after its answer
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"413", answer[:300]
    error = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert ("request_too_large" if anthropic else "invalid_request_error") in json.dumps(error)
    assert "is over 33554432 bytes" in json.dumps(error)


def test_keep_alive_survives_streams_and_errors(base_url: str) -> None:
    host, port = base_url.removeprefix("http://").removesuffix("/v1").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {**OPENAI_KEY, "content-type": "application/json"}
    conn.request("POST", "/v1/chat/completions", json.dumps(_chat("bug", stream=True)), headers)
    first = conn.getresponse()
    assert first.getheader("transfer-encoding") == "chunked"
    assert first.read().endswith(b"data: [DONE]\n\n")
    sock = conn.sock
    conn.request("POST", "/v1/chat/completions", b"{oops", headers)
    assert conn.getresponse().read() and conn.sock is sock
    conn.request("POST", "/v1/chat/completions", json.dumps(_chat("bug")), headers)
    response = conn.getresponse()
    assert response.status == 200 and json.loads(response.read())["object"] == "chat.completion"
    assert conn.sock is sock  # one TCP connection served all three
    conn.close()


def test_concurrent_requests_each_get_their_own_answer(base_url: str) -> None:
    texts = ["refund", "invoice", "package", "crash", "password", "hello"] * 5

    def ask(text: str) -> str:
        r = httpx.post(f"{base_url}/chat/completions", json=_chat(text, stream=True), headers=OPENAI_KEY)
        content = ""
        for line in r.text.splitlines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                content += choices[0]["delta"].get("content") or "" if choices else ""
        return json.loads(content)["intent"]

    with ThreadPoolExecutor(max_workers=12) as pool:
        intents = list(pool.map(ask, texts))
    assert intents == [classify(t)["intent"] for t in texts]


# --- the real SDKs --------------------------------------------------------------------------------


def test_openai_sdk_sync(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="dummy", max_retries=0)
    r = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "I was charged twice, FRAUD"}],
        temperature=0,
    )
    assert r.model == "gpt-4o-mini-2024-07-18"
    assert json.loads(r.choices[0].message.content or "") == {"intent": "billing", "needs_human": True}

    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["openai-model"] == "gpt-4o-mini-2024-07-18"

    chunks = list(
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "tracking number please"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == {"intent": "shipping", "needs_human": False}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])

    plain = list(
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}], stream=True
        )
    )
    assert all(c.usage is None for c in plain)


def test_openai_sdk_async(base_url: str) -> None:
    async def go() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="dummy", max_retries=0) as client:
            r = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "my account is locked"}]
            )
            stream = await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "app freezes"}], stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            return r.choices[0].message.content or "", text

    answer, streamed = asyncio.run(go())
    assert json.loads(answer)["intent"] == "account"
    assert json.loads(streamed)["intent"] == "technical"


def test_openai_sdk_without_key_gets_authentication_error(base_url: str) -> None:
    client = openai.OpenAI(
        base_url=base_url, api_key="dummy", max_retries=0, default_headers={"Authorization": ""}
    )
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])


def test_anthropic_sdk_sync(origin: str) -> None:
    client = anthropic.Anthropic(base_url=origin, api_key="dummy", max_retries=0)
    m = client.messages.create(
        model="claude-3-5-haiku-latest",
        max_tokens=100,
        system="You classify support tickets.",
        messages=[{"role": "user", "content": "Refund me or I call my lawyer"}],
    )
    assert m.model == "claude-3-5-haiku-20241022" and m.stop_reason == "end_turn"
    assert json.loads(m.content[0].text) == {"intent": "refund", "needs_human": True}

    with client.messages.stream(
        model="claude-3-5-haiku-latest", max_tokens=100, messages=[{"role": "user", "content": "login fails"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert json.loads(text) == {"intent": "account", "needs_human": False}
    assert final.usage.output_tokens > 1 and final.stop_reason == "end_turn"

    events = client.messages.create(
        model="claude-3-5-haiku-latest",
        max_tokens=100,
        messages=[{"role": "user", "content": "x"}],
        stream=True,
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop", "message_delta"} <= set(kinds)


def test_anthropic_sdk_async(origin: str) -> None:
    async def go() -> tuple[str, str]:
        async with anthropic.AsyncAnthropic(base_url=origin, api_key="dummy", max_retries=0) as client:
            m = await client.messages.create(
                model="claude-3-5-haiku-latest",
                max_tokens=100,
                messages=[{"role": "user", "content": [{"type": "text", "text": "Stolen package!"}]}],
            )
            async with client.messages.stream(
                model="claude-3-5-haiku-latest", max_tokens=100, messages=[{"role": "user", "content": "bug"}]
            ) as stream:
                streamed = "".join([t async for t in stream.text_stream])
            return m.content[0].text, streamed

    answer, streamed = asyncio.run(go())
    assert json.loads(answer) == {"intent": "shipping", "needs_human": True}
    assert json.loads(streamed)["intent"] == "technical"


def test_anthropic_sdk_without_key_gets_authentication_error(origin: str) -> None:
    client = anthropic.Anthropic(
        base_url=origin,
        api_key="dummy",
        max_retries=0,
        default_headers={"x-api-key": anthropic.omit, "Authorization": anthropic.omit},
    )
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(
            model="claude-3-5-haiku-latest", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )


# --- as a subprocess ------------------------------------------------------------------------------


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader.standin", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_subprocess_prints_url_first_serves_and_stops_cleanly_on_sigterm() -> None:
    proc, url = _start("--port", "0")
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", url), url
        r = httpx.post(
            f"{url}/chat/completions?key=sk-secret-in-query", json=_chat("refund"), headers=OPENAI_KEY
        )
        assert json.loads(r.json()["choices"][0]["message"]["content"])["intent"] == "refund"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # raises if it never stops
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "Traceback" not in err
    assert "POST /v1/chat/completions 200" in err
    assert "sk-" not in err  # neither headers nor the query string are logged


def test_subprocess_sigint_also_exits_zero() -> None:
    proc, url = _start()
    try:
        assert url.startswith("http://127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # raises if it never stops
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err


def test_port_in_use_is_one_clear_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "grader.standin", "--port", str(port)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0] and "--port" in lines[0]


def test_a_path_prefix_is_answered_as_the_plain_path_and_a_bad_one_is_one_line() -> None:
    # OpenRouter's URLs put /api before /v1: the drift probe answers that host with this server.
    proc, url = _start("--port", "0", "--path-prefix", "/api")
    try:
        origin = url.removesuffix("/v1")
        prefixed = httpx.post(f"{origin}/api/v1/chat/completions", json=_chat("refund"), headers=OPENAI_KEY)
        plain = httpx.post(f"{url}/chat/completions", json=_chat("refund"), headers=OPENAI_KEY)
        other = httpx.post(f"{origin}/other/v1/chat/completions", json=_chat("refund"), headers=OPENAI_KEY)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert prefixed.status_code == 200 and prefixed.json() == plain.json()
    assert other.status_code == 404
    bad = subprocess.run(
        [sys.executable, "-m", "grader.standin", "--path-prefix", "api/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "--path-prefix 'api/'" in lines[0]
