"""Stand-in profiles: a real `python -m grader.standin --profile` process on loopback, hit with the real
openai and anthropic SDKs (and raw HTTP where the wire itself is the point)."""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml

from grader.standin import answer_text
from grader.standin_profile import DRIFT_KINDS, PROFILES_DIR, load_profile
from tests.helpers.processes import end_group

pytestmark = pytest.mark.enable_socket

REPO = Path(__file__).resolve().parent.parent
DRIFTED = yaml.safe_load((PROFILES_DIR / "drifted.yaml").read_text(encoding="utf-8"))
TICKET = "I want a refund, I was charged twice"
BASELINE_TEXT = answer_text(TICKET)  # {"intent": "refund", "needs_human": false}
TRUTH = {"intent": "refund", "needs_human": False}
WIRES = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
WIRE_IDS = ["openai", "openai-stream", "anthropic", "anthropic-stream"]


# --- a stand-in process per profile -------------------------------------------------------------------


class _Standin:
    def __init__(self, profile: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grader.standin", "--port", "0", "--quiet", "--profile", profile, *extra],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            start_new_session=True,  # its own group, ended as a whole
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.url

    def stop(self) -> None:
        end_group(self.proc)


def _profile_file(tmp: Path, name: str, drift: dict[str, Any], seed: int = 15) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump({"version": 1, "name": name, "seed": seed, "drift": drift}), encoding="utf-8"
    )
    return path


@pytest.fixture(scope="module")
def forced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """forced(kind, **options): a stand-in playing the drifted profile's `kind` at rate 1.0 (one per kind)."""
    tmp = tmp_path_factory.mktemp("profiles")
    servers: dict[str, _Standin] = {}

    def start(kind: str, **options: Any) -> str:
        key = json.dumps([kind, options], sort_keys=True)
        if key not in servers:
            entry = {**DRIFTED["drift"][kind], **options, "rate": 1.0}
            servers[key] = _Standin(str(_profile_file(tmp, f"forced-{len(servers)}", {kind: entry})))
        return servers[key].url

    yield start
    for server in servers.values():
        server.stop()


# --- one request through the real SDKs, reduced to what a caller sees ----------------------------------


@dataclass
class Answer:
    headers: httpx.Headers
    text: str | None = None
    finish: str | None = None
    refusal: str | None = None
    tool: tuple[str, str] | None = None  # (name, arguments as JSON text)
    pieces: list[str] = field(default_factory=list)
    status: int = 200

    @property
    def truth(self) -> dict[str, Any]:
        return json.loads(self.headers["x-standin-truth"])


def _ask(url: str, wire: str, stream: bool, text: str = TICKET, **extra: Any) -> Answer:
    messages = [{"role": "user", "content": text}]
    try:
        if wire == "openai":
            client = openai.OpenAI(base_url=url, api_key="sk-test-standin", max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=messages, stream=stream, **extra
            )
            return _openai_answer(raw.headers, raw.parse(), stream)
        client_a = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="sk-ant-test", max_retries=0)
        raw_a = client_a.messages.with_raw_response.create(
            model="claude-3-5-haiku-latest", max_tokens=256, messages=messages, stream=stream, **extra
        )
        return _anthropic_answer(raw_a.headers, raw_a.parse(), stream)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        return Answer(headers=exc.response.headers, status=exc.status_code)


def _openai_answer(headers: httpx.Headers, parsed: Any, stream: bool) -> Answer:
    answer = Answer(headers=headers)
    if not stream:
        choice = parsed.choices[0]
        answer.text, answer.refusal, answer.finish = (
            choice.message.content,
            choice.message.refusal,
            choice.finish_reason,
        )
        if choice.message.tool_calls:
            call = choice.message.tool_calls[0].function
            answer.tool = (call.name, call.arguments)
        return answer
    name, args, refusal = None, "", None
    for chunk in parsed:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            answer.pieces.append(delta.content)
        if delta.refusal is not None:
            refusal = (refusal or "") + delta.refusal
        for call in delta.tool_calls or ():
            name = call.function.name or name
            args += call.function.arguments or ""
        answer.finish = chunk.choices[0].finish_reason or answer.finish
    answer.text, answer.refusal = "".join(answer.pieces) if answer.pieces else None, refusal
    if name is not None:
        answer.tool = (name, args)
    return answer


def _anthropic_answer(headers: httpx.Headers, parsed: Any, stream: bool) -> Answer:
    answer = Answer(headers=headers)
    if not stream:
        texts = [block.text for block in parsed.content if block.type == "text"]
        tools = [block for block in parsed.content if block.type == "tool_use"]
        answer.text, answer.finish = "".join(texts), parsed.stop_reason
        if tools:
            answer.tool = (tools[0].name, json.dumps(tools[0].input))
        return answer
    name, args = None, ""
    for event in parsed:
        if event.type == "content_block_start" and event.content_block.type == "tool_use":
            name = event.content_block.name
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            answer.pieces.append(event.delta.text)
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            args += event.delta.partial_json
        elif event.type == "message_delta":
            answer.finish = event.delta.stop_reason
    answer.text = "".join(answer.pieces)
    if name is not None:
        answer.tool = (name, args)
    return answer


def _stop(wire: str) -> str:
    return "stop" if wire == "openai" else "end_turn"


# --- every kind of the drifted profile is covered here ---------------------------------------------------


def test_the_drifted_profile_uses_every_kind_and_loads() -> None:
    assert set(DRIFTED["drift"]) == set(DRIFT_KINDS)
    profile = load_profile(PROFILES_DIR / "drifted.yaml")
    assert profile.name == "drifted" and 0 < sum(d.rate for d in profile.drifts) <= 1


# --- text drift --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
def test_code_fence_wraps_the_json(forced: Any, wire: str, stream: bool) -> None:
    answer = _ask(forced("code_fence"), wire, stream)
    assert answer.text == f"```json\n{BASELINE_TEXT}\n```"
    assert answer.finish == _stop(wire)
    assert answer.truth == {**TRUTH, "drift": "code_fence"}


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
@pytest.mark.parametrize("kind", ["prose_before", "prose_after"])
def test_prose_around_the_json(forced: Any, wire: str, stream: bool, kind: str) -> None:
    answer = _ask(forced(kind), wire, stream)
    prose = DRIFTED["drift"][kind]["text"]
    expected = f"{prose}\n\n{BASELINE_TEXT}" if kind == "prose_before" else f"{BASELINE_TEXT}\n\n{prose}"
    assert answer.text == expected
    with pytest.raises(json.JSONDecodeError):
        json.loads(answer.text)
    assert answer.truth["drift"] == kind


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
def test_extra_and_renamed_fields(forced: Any, wire: str, stream: bool) -> None:
    extra = _ask(forced("extra_field"), wire, stream)
    assert json.loads(extra.text or "") == {**TRUTH, "confidence": 0.92}
    assert extra.truth == {**TRUTH, "drift": "extra_field"}
    renamed = _ask(forced("renamed_field"), wire, stream)
    assert json.loads(renamed.text or "") == {"category": "refund", "needs_human": False}
    assert renamed.truth == {**TRUTH, "drift": "renamed_field"}


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
def test_label_case_and_synonym(forced: Any, wire: str, stream: bool) -> None:
    cased = _ask(forced("label_case"), wire, stream)
    assert json.loads(cased.text or "")["intent"] == "Refund"
    assert cased.truth == {**TRUTH, "drift": "label_case"}
    upper = _ask(forced("label_case", style="upper"), wire, stream)
    assert json.loads(upper.text or "")["intent"] == "REFUND"
    synonym = _ask(forced("label_synonym"), wire, stream)
    assert json.loads(synonym.text or "") == {"intent": "refunds", "needs_human": False}
    assert synonym.truth == {**TRUTH, "drift": "label_synonym"}


def test_a_synonym_applies_only_to_labels_it_names(forced: Any, tmp_path: Path) -> None:
    url = forced("label_synonym", synonyms={"billing": "payment"})
    refund = _ask(url, "openai", False)
    assert refund.text == BASELINE_TEXT and refund.truth["drift"] == "none"
    billing = _ask(url, "openai", False, text="Why is my invoice higher?")
    assert json.loads(billing.text or "")["intent"] == "payment"


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
def test_truncated_answer_is_cut_with_length_finish(forced: Any, wire: str, stream: bool) -> None:
    answer = _ask(forced("truncated"), wire, stream)
    assert answer.text and BASELINE_TEXT.startswith(answer.text) and answer.text != BASELINE_TEXT
    assert answer.finish == ("length" if wire == "openai" else "max_tokens")
    assert answer.truth == {**TRUTH, "drift": "truncated"}


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
def test_refusal(forced: Any, wire: str, stream: bool) -> None:
    answer = _ask(forced("refusal"), wire, stream)
    refusal = DRIFTED["drift"]["refusal"]["text"]
    if wire == "openai":  # the chat-completions shape: content null, the refusal in its own field
        assert answer.text is None and answer.refusal == refusal and answer.finish == "stop"
    else:
        assert answer.text == refusal and answer.finish == "refusal"
    assert answer.truth == {**TRUTH, "drift": "refusal"}


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
def test_empty_content(forced: Any, wire: str, stream: bool) -> None:
    answer = _ask(forced("empty"), wire, stream)
    assert not answer.text and answer.tool is None and answer.refusal is None
    assert answer.finish == _stop(wire)
    assert answer.truth == {**TRUTH, "drift": "empty"}


# --- HTTP errors, delay, tool call -------------------------------------------------------------------


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
@pytest.mark.parametrize(
    ("kind", "retry_after"), [("http_429", 1), ("http_429", None), ("http_500", None), ("http_500", 2)]
)
def test_http_errors_with_and_without_retry_after(
    forced: Any, wire: str, stream: bool, kind: str, retry_after: int | None
) -> None:
    answer = _ask(forced(kind, retry_after=retry_after), wire, stream)
    assert answer.status == int(kind.removeprefix("http_"))
    assert answer.headers.get("retry-after") == (None if retry_after is None else str(retry_after))
    assert answer.truth == {**TRUTH, "drift": kind}


def test_drifted_profile_sends_429_with_retry_after_and_500_without() -> None:
    assert DRIFTED["drift"]["http_429"]["retry_after"] == 1
    assert DRIFTED["drift"]["http_500"]["retry_after"] is None


def test_an_sdk_retry_after_429_rolls_again(tmp_path: Path) -> None:
    # Half the answers are 429s: the SDK's own retries (same request, next occurrence) get through.
    server = _Standin(str(_profile_file(tmp_path, "flaky", {"http_429": {"rate": 0.5, "retry_after": 0}})))
    try:
        client = openai.OpenAI(base_url=server.url, api_key="sk-test", max_retries=8)
        for i in range(6):
            reply = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": f"refund {i}"}]
            )
            assert json.loads(reply.choices[0].message.content or "")["intent"] == "refund"
    finally:
        server.stop()


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
def test_slow_answer_is_late_but_unchanged(forced: Any, wire: str, stream: bool) -> None:
    url = forced("slow", delay_seconds=0.6)
    started = time.monotonic()
    answer = _ask(url, wire, stream)
    assert time.monotonic() - started >= 0.6
    assert answer.text == BASELINE_TEXT and answer.truth == {**TRUTH, "drift": "slow"}


@pytest.mark.parametrize(("wire", "stream"), WIRES, ids=WIRE_IDS)
def test_tool_call_where_text_was_expected(forced: Any, wire: str, stream: bool) -> None:
    answer = _ask(forced("tool_call"), wire, stream)
    assert not answer.text
    assert answer.tool is not None and answer.tool[0] == "classify_ticket"
    assert json.loads(answer.tool[1]) == TRUTH
    assert answer.finish == ("tool_calls" if wire == "openai" else "tool_use")
    assert answer.truth == {**TRUTH, "drift": "tool_call"}


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_tool_call_uses_the_requests_own_tool_name(forced: Any, wire: str) -> None:
    schema = {"type": "object", "properties": {"intent": {"type": "string"}}}
    if wire == "openai":
        tools = [{"type": "function", "function": {"name": "label_ticket", "parameters": schema}}]
    else:
        tools = [{"name": "label_ticket", "input_schema": schema}]
    answer = _ask(forced("tool_call"), wire, False, tools=tools)
    assert answer.tool is not None and answer.tool[0] == "label_ticket"


# --- awkward stream splits -------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_split_stream_splits_mid_token_and_still_concatenates(forced: Any, wire: str) -> None:
    answer = _ask(forced("split_stream"), wire, True)
    assert answer.text == BASELINE_TEXT
    assert answer.truth == {**TRUTH, "drift": "split_stream"}
    # A boundary inside a word: `"intent"` does not arrive whole in any delta.
    assert not any("intent" in piece for piece in answer.pieces)
    mid_word = [
        (a, b) for a, b in itertools.pairwise(answer.pieces) if re.search(r"\w$", a) and re.match(r"\w", b)
    ]
    assert len(mid_word) >= 3, answer.pieces


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_split_stream_breaks_events_across_http_chunks(forced: Any, wire: str) -> None:
    url = forced("split_stream")
    chunks = _raw_chunks(url, wire)
    # Real SSE events end in a blank line; here most HTTP chunks end mid-event.
    assert sum(not c.endswith(b"\n\n") for c in chunks) > len(chunks) // 2
    assert any(c in (b"dat", b"eve") for c in chunks)  # cut inside the field name `data:` / `event:`


def test_split_stream_does_not_apply_to_a_whole_answer(forced: Any) -> None:
    answer = _ask(forced("split_stream"), "openai", False)
    assert answer.text == BASELINE_TEXT and answer.truth["drift"] == "none"


def _raw_chunks(url: str, wire: str) -> list[bytes]:
    """The HTTP/1.1 chunks of one streamed answer, as they were framed on the wire."""
    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    if wire == "openai":
        path, headers = "/v1/chat/completions", "Authorization: Bearer sk-test\r\n"
        body = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": TICKET}]}
    else:
        path, headers = "/v1/messages", "x-api-key: sk-ant-test\r\nanthropic-version: 2023-06-01\r\n"
        body = {"model": "claude-3-5-haiku-latest", "max_tokens": 64, "stream": True}
        body["messages"] = [{"role": "user", "content": TICKET}]
    data = json.dumps(body).encode()
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    ).encode() + data
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        raw = b""
        while block := sock.recv(65536):
            raw += block
    _, _, rest = raw.partition(b"\r\n\r\n")
    chunks = []
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return chunks
        chunks.append(rest[:size])
        rest = rest[size + 2 :]


# --- determinism, truth log, served model ----------------------------------------------------------


def _decisions(profile: str, *extra: str) -> list[tuple[str, str]]:
    server = _Standin(profile, *extra)
    try:
        out = []
        for i in range(30):
            r = httpx.post(
                f"{server.url}/chat/completions",
                json={
                    "model": "gpt-4o-mini",
                    "messages": [{"role": "user", "content": f"ticket {i}: refund"}],
                },
                headers={"Authorization": "Bearer sk-test"},
                timeout=30,
            )
            out.append((json.loads(r.headers["x-standin-truth"])["drift"], r.text))
        return out
    finally:
        server.stop()


def test_same_seed_same_requests_same_drift_and_bodies(tmp_path: Path) -> None:
    drift = {
        k: {**v, "rate": 0.12}
        for k, v in DRIFTED["drift"].items()
        if k in ("code_fence", "label_case", "empty", "extra_field", "http_429")
    }
    first = _decisions(str(_profile_file(tmp_path, "a", drift, seed=7)))
    again = _decisions(str(_profile_file(tmp_path, "b", drift, seed=7)))
    other = _decisions(str(_profile_file(tmp_path, "c", drift, seed=8)))
    assert first == again
    kinds = [k for k, _ in first]
    assert len(set(kinds)) >= 3, kinds  # the rates really do mix drift into the run
    assert [k for k, _ in other] != kinds


def test_truth_log_matches_the_headers_and_served_model_is_the_profiles(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    log.write_text('{"kept": true}\n', encoding="utf-8")  # appended to, never overwritten
    answers = _decisions("drifted", "--truth-log", str(log))
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {"kept": True}
    assert [line["drift"] for line in lines[1:]] == [kind for kind, _ in answers]
    assert {line["model"] for line in lines[1:]} == {"gpt-4o-mini-2025-06-30"}
    assert all(line["intent"] == "refund" and line["needs_human"] is False for line in lines[1:])
    ok = next(body for kind, body in answers if kind == "none")
    assert json.loads(ok)["model"] == "gpt-4o-mini-2025-06-30"


def test_drifted_profile_plays_a_newer_anthropic_snapshot_too() -> None:
    server = _Standin("drifted")
    try:
        models, kinds = set(), set()
        for i in range(12):
            body = {"model": "claude-3-5-haiku-latest", "max_tokens": 64}
            body["messages"] = [{"role": "user", "content": f"ticket {i}: where is my package"}]
            r = httpx.post(f"{server.url}/messages", json=body, headers={"x-api-key": "k"}, timeout=30)
            kinds.add(json.loads(r.headers["x-standin-truth"])["drift"])
            if r.status_code == 200:
                models.add(r.json()["model"])
        assert models == {"claude-3-5-haiku-20250630"}
        assert len(kinds) >= 3, kinds
    finally:
        server.stop()


# --- baseline = no profile ----------------------------------------------------------------------------


def test_baseline_answers_exactly_as_without_a_profile() -> None:
    plain = subprocess.Popen(
        [sys.executable, "-m", "grader.standin", "--port", "0", "--quiet"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    baseline = _Standin("baseline")
    try:
        assert plain.stdout is not None
        plain_url = plain.stdout.readline().strip()
        requests = [
            ("/chat/completions", {"Authorization": "Bearer sk-test"}, {"model": "gpt-4o-mini"}),
            ("/chat/completions", {"Authorization": "Bearer sk-test"}, {"model": "gpt-4o", "stream": True}),
            ("/chat/completions", {"Authorization": "Bearer k"}, {"model": "gpt-4o", "max_tokens": 3}),
            ("/messages", {"x-api-key": "k"}, {"model": "claude-3-5-haiku-latest", "max_tokens": 50}),
            (
                "/messages",
                {"x-api-key": "k"},
                {"model": "claude-sonnet-4-0", "max_tokens": 4, "stream": True},
            ),
        ]
        for text in (TICKET, "My LAWYER will hear about my stolen package"):
            for path, headers, extra in requests:
                body = {**extra, "messages": [{"role": "user", "content": text}]}
                a = httpx.post(plain_url + path, json=body, headers=headers)
                b = httpx.post(baseline.url + path, json=body, headers=headers)
                assert (a.status_code, a.content) == (b.status_code, b.content)
                truth = json.loads(b.headers.pop("x-standin-truth"))
                assert truth["drift"] == "none"
                for h in (a.headers, b.headers):
                    h.pop("date", None)
                assert a.headers == b.headers
    finally:
        plain.terminate()
        plain.wait(timeout=60)  # a generous deadline: a busy machine is slow, not wrong
        baseline.stop()


# --- bad profiles: one file:line line, exit 2 -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("version: 1\nname: x\nseed: 1\ncolour: red\n", 4, "'colour' is not a profile key"),
        ("version: 1\nname: x\nseed: one\n", 3, "'seed' must be a whole number"),
        (
            "version: 1\nname: x\ndrift:\n  code_fence: {rate: 1.5}\n",
            4,
            "'drift.code_fence.rate' must be a number from 0 to 1",
        ),
        ("version: 1\nname: x\ndrift:\n  code_fence: {rate: -0.1}\n", 4, "must be a number from 0 to 1"),
        (
            "version: 1\nname: x\ndrift:\n  empty: {rate: 0.1}\n  hallucinate: {rate: 0.1}\n",
            5,
            "not a drift kind",
        ),
        ("version: 1\nname: x\ndrift:\n  slow:\n    rate: 0.1\n    delay: 3\n", 6, "not an option of slow"),
        ("version: 1\nname: x\ndrift:\n  http_429: {rate: 0.2, retry_after: soon}\n", 4, "retry_after"),
        ("version: 1\nname: x\ndrift:\n  label_synonym: {rate: 0.2}\n", 4, "needs 'synonyms'"),
        (
            "version: 1\nname: x\ndrift:\n  empty: {rate: 0.6}\n  slow: {rate: 0.6}\n",
            3,
            "rates add up to 1.2",
        ),
        ("version: 1\nname: [x\n", 3, "invalid YAML"),
        ("version: 2\nname: x\n", 1, "'version' must be 1"),
    ],
)
def test_bad_profile_is_one_file_line_and_exit_2(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "grader.standin", "--profile", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"standin: error: {path}:{line}: "), lines[0]
    assert fragment in lines[0]


def test_missing_profile_and_truth_log_without_profile_exit_2(tmp_path: Path) -> None:
    for args in (["--profile", str(tmp_path / "nope.yaml")], ["--truth-log", str(tmp_path / "t.jsonl")]):
        proc = subprocess.run(
            [sys.executable, "-m", "grader.standin", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr


def test_standin_copied_alone_refuses_a_profile_in_one_line(tmp_path: Path) -> None:
    # The canary probe runs standin.py alone under an interpreter without the grader (-S: no site-packages):
    # without --profile it needs only the standard library; with one it says what to do, not a traceback.
    (tmp_path / "standin.py").write_bytes((REPO / "grader" / "standin.py").read_bytes())
    proc = subprocess.run(
        [sys.executable, "-E", "-S", "standin.py", "--profile", "baseline"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "standin: error: --profile needs the grader package: run python -m grader.standin"
    )


def test_order_rotate_sends_every_kind_in_turn_and_a_bad_order_names_its_line(tmp_path: Path) -> None:
    """`order: rotate` (the drift probe's cover run): every answer drifts, the kinds in the profile's order
    from the one the seed picks, a kind that does not apply passing its turn; repeats of one request too."""
    from grader.standin_drift import Drifter
    from grader.standin_profile import ProfileError

    path = tmp_path / "cover.yaml"
    path.write_text(
        "version: 1\nname: cover\nseed: 4\norder: rotate\n"
        "drift:\n  code_fence: {rate: 0.25}\n  refusal: {rate: 0.25}\n  split_stream: {rate: 0.25}\n"
        "  empty: {rate: 0.25}\n",
        encoding="utf-8",
    )
    drifter = Drifter(load_profile(path))
    plain = lambda drift: drift.kind != "split_stream"  # noqa: E731  (a plain answer: no stream to split)
    sent = [drifter.choose(b"same request", plain) for _ in range(6)]
    assert [d.kind for d in sent if d is not None] == [
        "code_fence",  # seed 4 modulo 4 kinds: the first
        "refusal",
        "empty",  # split_stream does not apply: its turn passes
        "code_fence",
        "refusal",
        "empty",
    ]
    path.write_text(path.read_text(encoding="utf-8").replace("rotate", "sideways"), encoding="utf-8")
    with pytest.raises(ProfileError, match=r"cover\.yaml:4: .*'order'.*random, rotate"):
        load_profile(path)
