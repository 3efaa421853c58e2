"""Loopback stand-in model server speaking the OpenAI chat-completions and Anthropic messages wire formats.

It answers every request deterministically from `grader/rules/standin.yaml` (or the YAML or JSON file given
with `--rules`): the last user message is classified into `{"intent": ..., "needs_human": ...}`. Ids,
`created` and every other body field derive from a hash of the request, so recording the same request twice
yields byte-identical tapes.

    python -m grader.standin [--port N] [--host 127.0.0.1] [--quiet] [--rules FILE]
                             [--profile FILE|baseline|drifted] [--truth-log FILE]

prints its base URL (`http://127.0.0.1:PORT/v1`) as the first stdout line and serves until SIGTERM/SIGINT.
On stderr (unless --quiet) it says what to set for each flavour: `OPENAI_BASE_URL` is that URL, and
`ANTHROPIC_BASE_URL` is the same without `/v1` (Anthropic clients add `/v1/messages` themselves); any
non-empty API key is accepted.
From Python: `with running() as base_url: ...`, or `server, base_url = serve()` then `server.shutdown()`.
`--profile` plays a model that drifts (grader/standin_profile.py, grader/standin_drift.py, docs/standin.md);
without it the stand-in answers exactly as above.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import signal
import socket
import socketserver
import string
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:  # imported lazily: the canary probe runs this file alone, without the grader package
    from grader.standin_drift import Drifter

__all__ = [
    "Rules",
    "RulesError",
    "StandinServer",
    "answer_text",
    "classify",
    "fingerprints",
    "flavour_settings",
    "load_rules",
    "main",
    "make_server",
    "running",
    "serve",
    "served_model",
    "system_prompts",
]

RULES_PATH = Path(__file__).parent / "rules" / "standin.yaml"

_OPENAI_VERSION = "2020-10-01"
_ANTHROPIC_VERSION = "2023-06-01"
_B62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
# A dated snapshot ends in 2024-07-18, 20241022 or 0125/0613 (the old OpenAI style).
_DATED = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")
# The unit of the stand-in's token counts and stream chunks: a word (with its leading space) or one symbol.
_TOKEN = re.compile(r"\s*(?:\w+|[^\w\s])", re.UNICODE)
# Keeps `created` in a plausible range (mid-2024 onwards) while staying a pure function of the request.
_CREATED_BASE = 1_720_000_000
_CREATED_SPAN = 31_536_000
_MODEL_NAME = re.compile(r"[\x21-\x7e]{1,256}")


class RulesError(ValueError):
    """The rules file is malformed; the message names the file and what to fix."""


@dataclass(frozen=True)
class Rules:
    intents: tuple[tuple[str, tuple[str, ...]], ...]
    default_intent: str
    needs_human: tuple[str, ...]
    aliases: dict[str, dict[str, str]]
    fallback_suffix: dict[str, str]
    listed_models: dict[str, tuple[str, ...]]


def _keywords(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(k, str) and k for k in value):
        raise RulesError(f"{where}: expected a non-empty list of non-empty strings")
    return tuple(k.lower() for k in value)


def load_rules(path: Path = RULES_PATH) -> Rules:
    """Read and validate the answering rules (YAML, or JSON when the name ends in .json); raises RulesError
    with one clear line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(f"{path}: cannot read the stand-in rules: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RulesError(f"{path}: the stand-in rules are not UTF-8 text") from None
    # JSON needs no PyYAML: the canary probe starts the stand-in under a submission's interpreter.
    data = _parse_json(path, text) if path.suffix.lower() == ".json" else _parse_yaml(path, text)
    if not isinstance(data, dict) or data.get("version") != 1:
        raise RulesError(f"{path}: expected a mapping with 'version: 1'")
    raw_intents = data.get("intents")
    if not isinstance(raw_intents, list) or not raw_intents:
        raise RulesError(f"{path}: 'intents' must be a non-empty list of {{intent, keywords}}")
    intents = []
    for i, item in enumerate(raw_intents):
        if not isinstance(item, dict) or not isinstance(item.get("intent"), str):
            raise RulesError(f"{path}: intents[{i}] needs an 'intent' name and 'keywords'")
        intents.append((item["intent"], _keywords(item.get("keywords"), f"{path}: intents[{i}].keywords")))
    default_intent = data.get("default_intent")
    if not isinstance(default_intent, str) or not default_intent:
        raise RulesError(f"{path}: 'default_intent' must be a non-empty string")
    served = data.get("served_models") or {}
    aliases: dict[str, dict[str, str]] = {}
    fallback: dict[str, str] = {}
    for provider in ("openai", "anthropic"):
        section = served.get(provider) if isinstance(served, dict) else None
        if not isinstance(section, dict) or not isinstance(section.get("fallback_suffix"), str):
            raise RulesError(f"{path}: served_models.{provider} needs 'fallback_suffix' and 'aliases'")
        table = section.get("aliases") or {}
        if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
            raise RulesError(f"{path}: served_models.{provider}.aliases must map model names to names")
        aliases[provider] = {str(k): v for k, v in table.items()}
        fallback[provider] = section["fallback_suffix"]
    listed = data.get("listed_models") or {}
    return Rules(
        intents=tuple(intents),
        default_intent=default_intent,
        needs_human=_keywords(data.get("needs_human"), f"{path}: needs_human"),
        aliases=aliases,
        fallback_suffix=fallback,
        listed_models={p: tuple(str(m) for m in listed.get(p, ())) for p in ("openai", "anthropic")},
    )


def _parse_json(path: Path, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RulesError(f"{path}:{exc.lineno}: invalid JSON in the stand-in rules; fix the syntax") from None


def _parse_yaml(path: Path, text: str) -> object:
    import yaml  # local: the canary probe runs this file alone, standard library only, with JSON rules

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise RulesError(f"{path}{line}: invalid YAML in the stand-in rules; fix the syntax") from None


@lru_cache(maxsize=1)
def _default_rules() -> Rules:
    return load_rules()


def classify(text: str, rules: Rules | None = None) -> dict[str, object]:
    """The stand-in's verdict for one user message: {"intent": str, "needs_human": bool}."""
    rules = rules or _default_rules()
    low = text.lower()
    intent = next(
        (name for name, words in rules.intents if any(w in low for w in words)), rules.default_intent
    )
    return {"intent": intent, "needs_human": any(w in low for w in rules.needs_human)}


def answer_text(text: str, rules: Rules | None = None) -> str:
    """The exact assistant content the stand-in sends for a user message."""
    return json.dumps(classify(text, rules))


def served_model(model: str, provider: str, rules: Rules | None = None) -> str:
    """The dated snapshot a real service would report for `model` (provider: "openai" | "anthropic")."""
    rules = rules or _default_rules()
    if model in rules.aliases[provider]:
        return rules.aliases[provider][model]
    if _DATED.search(model):
        return model
    base = model.removesuffix("-latest")
    return f"{base}-{rules.fallback_suffix[provider]}"


# --- request reading -------------------------------------------------------------------------------------


# Anthropic's documented request size limit. A body over it is answered 413 before it is read: red team 6
# had the drift probe's helper buffer a 1.2 GB body (2.48 GB resident), bounded only by the run's cgroup.
_MAX_BODY_BYTES = 32 * 1024 * 1024


class _TooLarge(ValueError):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class _BadRequest(Exception):
    """A request the real service would refuse with 400; the message is what the client sees."""


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") in ("text", None)
            and isinstance(part.get("text"), str)
        )
    return ""


_SYSTEM_ROLES = ("system", "developer")


def system_prompts(body: object) -> list[str]:
    """The system prompts a request body holds: OpenAI's ``system``/``developer`` messages (also as ``[role,
    text]`` pairs, as a hand-rolled recording may store them), Anthropic's top-level ``system`` (a string or
    text blocks). loud-miss re-words the recorded ones (red team 6, H1); the drift stand-in logs digests of
    the ones an agent sends live (H6)."""
    if not isinstance(body, dict):
        return []
    found = [_text_of(body.get("system"))]
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") in _SYSTEM_ROLES:
            found.append(_text_of(message.get("content")))
        elif isinstance(message, list) and len(message) == 2 and message[0] in _SYSTEM_ROLES:
            found.append(_text_of(message[1]))
    return [text.strip() for text in found if text.strip()]


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest("'messages' must be a non-empty array of {role, content} objects")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _BadRequest(f"messages[{i}] must be an object with a 'role'")
        if "content" in message and not isinstance(message["content"], (str, list, type(None))):
            raise _BadRequest(f"messages[{i}].content must be a string or an array of content parts")
    return messages


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _BadRequest("you must provide a model parameter")
    # The name is echoed in a response header: anything but visible ASCII could split or break the headers.
    if not _MODEL_NAME.fullmatch(model):
        raise _BadRequest("'model' must be a model name of visible ASCII characters, e.g. gpt-4o-mini")
    return model


def _max_tokens(body: dict[str, Any], *names: str, required: bool = False) -> int | None:
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _BadRequest(f"'{name}' must be an integer >= 1")
        return value
    if required:
        raise _BadRequest(f"{names[0]}: Field required")
    return None


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def _tokens(text: str) -> list[str]:
    pieces = _TOKEN.findall(text)
    # Trailing whitespace is not captured by the pattern; keep it so the pieces always rejoin to the text.
    rest = text[len("".join(pieces)) :]
    if rest:
        pieces.append(rest)
    return pieces


def _prompt_tokens(body: dict[str, Any], messages: list[dict[str, Any]]) -> int:
    text = [_text_of(body.get("system"))] + [_text_of(m.get("content")) for m in messages]
    # Per-message framing costs a few tokens at the real services too.
    return sum(len(_tokens(t)) for t in text) + 3 * len(messages) + 3


@dataclass(frozen=True)
class _Reply:
    model: str
    served: str
    pieces: list[str]  # the content, in stream chunks
    truncated: bool
    prompt_tokens: int
    digest: bytes

    @property
    def content(self) -> str:
        return "".join(self.pieces)

    def ident(self, label: str, length: int) -> str:
        number = int.from_bytes(hashlib.sha256(self.digest + label.encode()).digest(), "big")
        chars = []
        for _ in range(length):
            number, rem = divmod(number, 62)
            chars.append(_B62[rem])
        return "".join(chars)

    def number(self, label: str, span: int) -> int:
        return int.from_bytes(hashlib.sha256(self.digest + label.encode()).digest()[:8], "big") % span

    @property
    def created(self) -> int:
        return _CREATED_BASE + self.number("created", _CREATED_SPAN)


def _reply(path: str, body: dict[str, Any], provider: str, limit: int | None, rules: Rules) -> _Reply:
    messages = _messages(body)
    model = _model(body)
    pieces = _tokens(answer_text(_last_user_text(messages), rules))
    truncated = limit is not None and limit < len(pieces)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _Reply(
        model=model,
        served=served_model(model, provider, rules),
        pieces=pieces[:limit] if truncated else pieces,
        truncated=truncated,
        prompt_tokens=_prompt_tokens(body, messages),
        # surrogatepass: JSON may carry lone surrogate escapes, which strict UTF-8 refuses.
        digest=hashlib.sha256(f"{path}\n{canonical}".encode("utf-8", "surrogatepass")).digest(),
    )


def fingerprints(path: str, body: dict[str, Any], rules: Rules | None = None) -> list[str]:
    """Strings only this stand-in puts in its answer to ``body`` sent to ``path``: the response ids it
    derives from the request (both wire formats) and its system fingerprint for the served model. A tape
    holding one was answered by the stand-in, whatever endpoint its metadata names: a real service's ids
    are random, and its fingerprint is not a hash of the model's name."""
    rules = rules or _default_rules()
    try:
        openai, anthropic = (
            _reply(path, body, provider, None, rules) for provider in ("openai", "anthropic")
        )
    except (_BadRequest, TypeError, ValueError, AttributeError):
        return []
    return [
        "chatcmpl-" + openai.ident("id", 29),
        "msg_01" + anthropic.ident("id", 22),
        _fingerprint(openai.served),
    ]


# --- OpenAI wire format ------------------------------------------------------------------------------------


def _openai_usage(reply: _Reply) -> dict[str, Any]:
    completion = len(reply.pieces)
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": reply.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _fingerprint(served: str) -> str:
    return "fp_" + hashlib.sha256(served.encode()).hexdigest()[:10]


def _openai_completion(reply: _Reply) -> dict[str, Any]:
    return {
        "id": "chatcmpl-" + reply.ident("id", 29),
        "object": "chat.completion",
        "created": reply.created,
        "model": reply.served,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": reply.content,
                    "refusal": None,
                    "annotations": [],
                },
                "logprobs": None,
                "finish_reason": "length" if reply.truncated else "stop",
            }
        ],
        "usage": _openai_usage(reply),
        "service_tier": "default",
        "system_fingerprint": _fingerprint(reply.served),
    }


def _openai_stream(reply: _Reply, include_usage: bool) -> Iterator[str]:
    base = {
        "id": "chatcmpl-" + reply.ident("id", 29),
        "object": "chat.completion.chunk",
        "created": reply.created,
        "model": reply.served,
        "service_tier": "default",
        "system_fingerprint": _fingerprint(reply.served),
    }

    def chunk(delta: dict[str, Any], finish: str | None) -> str:
        data = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if include_usage:
            data["usage"] = None
        return f"data: {json.dumps(data)}\n\n"

    yield chunk({"role": "assistant", "content": "", "refusal": None}, None)
    for piece in reply.pieces:
        yield chunk({"content": piece}, None)
    yield chunk({}, "length" if reply.truncated else "stop")
    if include_usage:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': _openai_usage(reply)})}\n\n"
    yield "data: [DONE]\n\n"


def _openai_error(
    message: str, kind: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# --- Anthropic wire format ---------------------------------------------------------------------------------


def _anthropic_message(reply: _Reply) -> dict[str, Any]:
    return {
        "id": "msg_01" + reply.ident("id", 22),
        "type": "message",
        "role": "assistant",
        "model": reply.served,
        "content": [{"type": "text", "text": reply.content}],
        "stop_reason": "max_tokens" if reply.truncated else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": len(reply.pieces),
            "service_tier": "standard",
        },
    }


def _anthropic_stream(reply: _Reply) -> Iterator[str]:
    def event(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"

    start = _anthropic_message(reply)
    start.update(content=[], stop_reason=None)
    start["usage"] = {**start["usage"], "output_tokens": 1}
    yield event("message_start", {"message": start})
    yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    yield event("ping", {})
    for piece in reply.pieces:
        yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
    yield event("content_block_stop", {"index": 0})
    stop = "max_tokens" if reply.truncated else "end_turn"
    delta = {"stop_reason": stop, "stop_sequence": None}
    yield event("message_delta", {"delta": delta, "usage": {"output_tokens": len(reply.pieces)}})
    yield event("message_stop", {})


def _anthropic_error(
    message: str, kind: str = "invalid_request_error", request_id: str = ""
) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}


# --- HTTP ---------------------------------------------------------------------------------------------------


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # Reusing the address lets a restarted stand-in take its old port at once.
    allow_reuse_address = True
    # Set by --profile: answers then go through the profile's drift (grader/standin_drift.py).
    drift: Drifter | None = None
    # Set by --path-prefix: what a provider puts before /v1/ (OpenRouter's /api), dropped before routing.
    path_prefixes: tuple[str, ...] = ()

    def __init__(self, address: tuple[str, int], rules: Rules, log: Callable[[str], None] | None) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.rules = rules
        self.log = log
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls getfqdn(), which stalls for seconds where DNS is unreachable
        # (inside the grader's network namespace); the stand-in never needs the name.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: object, client_address: object) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):  # the client went away mid-reply: nothing to report
            return
        line = f"standin: internal error while answering: {type(exc).__name__}: {exc}"
        (self.log or (lambda text: print(text, file=sys.stderr, flush=True)))(line)

    @property
    def base_url(self) -> str:
        address, port = self.server_address[:2]
        text = address.decode() if isinstance(address, bytes) else str(address)
        host = f"[{text}]" if ":" in text else text
        return f"http://{host}:{port}/v1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin/1"
    sys_version = ""
    # Idle keep-alive connections are dropped after this many seconds, as real front ends do.
    timeout = 120
    server: StandinServer

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    # Request lines and headers may carry keys: log only the method, the path without its query, the status.
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if self.server.log is not None:
            path = urlsplit(self.path).path
            self.server.log(f"standin: {self.command} {path} {code}")

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _provider(self, path: str) -> str:
        if path == "/v1/messages" or "x-api-key" in self.headers or "anthropic-version" in self.headers:
            return "anthropic"
        return "openai"

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            total = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                total += size
                if total > _MAX_BODY_BYTES:
                    raise _TooLarge(total)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        if length > _MAX_BODY_BYTES:
            raise _TooLarge(length)
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        for prefix in self.server.path_prefixes:
            if path.startswith(prefix + "/v1/"):
                path = path[len(prefix) :]
                break
        provider = self._provider(path)
        try:
            raw = self._read_body()
        except _TooLarge as exc:
            self.close_connection = True  # the rest of the body is never read
            too_large = f"the request body ({exc.size} bytes) is over {_MAX_BODY_BYTES} bytes"
            self._error(provider, 413, too_large, None if provider == "openai" else "request_too_large")
            return
        except ValueError:
            self.close_connection = True
            self._error(provider, 400, "the request body is not valid chunked or Content-Length framed data")
            return
        routes = {
            ("POST", "/v1/chat/completions"): self._chat_completions,
            ("POST", "/v1/messages"): self._messages,
            ("GET", "/v1/models"): self._models,
        }
        handler = routes.get((self.command, path))
        if handler is None:
            self._not_found(provider, path)
            return
        if not self._authorized(provider):
            self._unauthorized(provider)
            return
        handler(raw, path)

    def _authorized(self, provider: str) -> bool:
        bearer = self.headers.get("authorization", "")
        has_bearer = bearer[:7].lower() == "bearer " and bool(bearer[7:].strip())
        if provider == "anthropic":
            return bool(self.headers.get("x-api-key", "").strip()) or has_bearer
        return has_bearer

    def _request_id(self, provider: str, seed: bytes) -> str:
        digest = hashlib.sha256(b"request-id\n" + seed).digest()
        if provider == "openai":
            return "req_" + digest.hex()[:32]
        number = int.from_bytes(digest, "big")
        return "req_011C" + "".join(_B62[(number // 62**i) % 62] for i in range(20))

    def _common_headers(self, provider: str, seed: bytes, model: str | None = None) -> dict[str, str]:
        request_id = self._request_id(provider, seed)
        if provider == "openai":
            headers = {
                "x-request-id": request_id,
                "openai-version": _OPENAI_VERSION,
                "openai-processing-ms": str(120 + int.from_bytes(seed[:2] or b"\0", "big") % 600),
            }
            if model:
                headers["openai-model"] = model
            return headers
        return {
            "request-id": request_id,
            "anthropic-version": self.headers.get("anthropic-version") or _ANTHROPIC_VERSION,
        }

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, events: Iterator[str], headers: dict[str, str]) -> None:
        # Chunked encoding keeps the connection reusable, as the real services' streams are.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            for text in events:
                data = text.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _error(self, provider: str, status: int, message: str, kind: str | None = None) -> None:
        seed = f"{status}\n{message}".encode()
        headers = self._common_headers(provider, seed)
        if provider == "openai":
            body = _openai_error(message, kind or "invalid_request_error")
        else:
            body = _anthropic_error(message, kind or "invalid_request_error", headers["request-id"])
        self._send_json(status, body, headers)

    def _not_found(self, provider: str, path: str) -> None:
        # The commonest slip: the printed base URL (ending in /v1) given to an Anthropic client, which adds
        # /v1 itself. Say so in the answer, which the candidate's error message shows.
        hint = (
            "; the path has /v1 twice: Anthropic clients add /v1 themselves, so set ANTHROPIC_BASE_URL to "
            "the base URL without /v1"
            if path.startswith("/v1/v1/")
            else ""
        )
        if provider == "openai":
            self._error(provider, 404, f"Invalid URL ({self.command} {path}){hint}")
        else:
            self._error(provider, 404, f"Not Found ({self.command} {path}){hint}", "not_found_error")

    def _unauthorized(self, provider: str) -> None:
        if provider == "openai":
            message = (
                "You didn't provide an API key. You need to provide your API key in an Authorization header "
                "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            )
            self._error(provider, 401, message)
        else:
            self._error(provider, 401, "x-api-key header is required", "authentication_error")

    def _parse(self, provider: str, raw: bytes) -> dict[str, Any] | None:
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            body = None
        if not isinstance(body, dict):
            message = (
                "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
                "your HTTP library correctly. The OpenAI API expects a JSON payload.)"
                if provider == "openai"
                else "The request body is not valid JSON."
            )
            self._error(provider, 400, message)
            return None
        return body

    def _chat_completions(self, raw: bytes, path: str) -> None:
        body = self._parse("openai", raw)
        if body is None:
            return
        try:
            limit = _max_tokens(body, "max_completion_tokens", "max_tokens")
            reply = _reply(path, body, "openai", limit, self.server.rules)
        except _BadRequest as exc:
            self._error("openai", 400, str(exc))
            return
        if self.server.drift is not None:
            self.server.drift.answer(self, "openai", path, body, reply)
            return
        headers = self._common_headers("openai", reply.digest, reply.served)
        if body.get("stream") is True:
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            self._send_stream(_openai_stream(reply, include_usage), headers)
        else:
            self._send_json(200, _openai_completion(reply), headers)

    def _messages(self, raw: bytes, path: str) -> None:
        body = self._parse("anthropic", raw)
        if body is None:
            return
        try:
            limit = _max_tokens(body, "max_tokens", required=True)
            reply = _reply(path, body, "anthropic", limit, self.server.rules)
        except _BadRequest as exc:
            self._error("anthropic", 400, str(exc))
            return
        if self.server.drift is not None:
            self.server.drift.answer(self, "anthropic", path, body, reply)
            return
        headers = self._common_headers("anthropic", reply.digest)
        if body.get("stream") is True:
            self._send_stream(_anthropic_stream(reply), headers)
        else:
            self._send_json(200, _anthropic_message(reply), headers)

    def _models(self, raw: bytes, path: str) -> None:
        rules = self.server.rules
        if self._provider(path) == "anthropic":
            data = [
                {"type": "model", "id": m, "display_name": m, "created_at": "2024-10-22T00:00:00Z"}
                for m in rules.listed_models["anthropic"]
            ]
            body: dict[str, Any] = {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
            self._send_json(200, body, self._common_headers("anthropic", b"models"))
            return
        models = [
            {"id": m, "object": "model", "created": _CREATED_BASE, "owned_by": "system"}
            for m in rules.listed_models["openai"]
        ]
        self._send_json(200, {"object": "list", "data": models}, self._common_headers("openai", b"models"))


# --- entry points -------------------------------------------------------------------------------------------


def flavour_settings(base_url: str) -> list[str]:
    """The variables a client of each flavour sets to use the stand-in at ``base_url`` (``.../v1``)."""
    root = base_url.removesuffix("/v1")
    return [
        f"OpenAI flavour:    export OPENAI_BASE_URL={base_url} OPENAI_API_KEY=standin",
        f"Anthropic flavour: export ANTHROPIC_BASE_URL={root} ANTHROPIC_API_KEY=standin "
        "(no /v1: Anthropic clients add it)",
    ]


def make_server(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    rules: Rules | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[StandinServer, str]:
    """Bind the stand-in (port 0 = any free port) without serving yet; returns (server, base_url)."""
    server = StandinServer((host, port), rules or _default_rules(), log)
    return server, server.base_url


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    rules: Rules | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[StandinServer, str]:
    """Bind and serve in a daemon thread; stop with `server.shutdown(); server.server_close()`."""
    server, base_url = make_server(host, port, rules=rules, log=log)
    threading.Thread(target=server.serve_forever, name="standin", daemon=True).start()
    return server, base_url


@contextmanager
def running(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    rules: Rules | None = None,
    log: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """`with running() as base_url:` serves in a background thread for the block's duration."""
    server, base_url = serve(host, port, rules=rules, log=log)
    try:
        yield base_url
    finally:
        server.shutdown()
        server.server_close()


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535 (0 = any free port), not {value}")
    return value


def _drifter(spec: str, truth_log: Path | None, rules: Rules | None) -> Drifter:

    try:  # local: the canary probe runs this file alone, without the grader package
        from grader.standin_drift import Drifter
        from grader.standin_profile import ProfileError, load_profile, resolve_profile
    except ImportError:  # this file copied alone, as the canary probe does
        raise RulesError("--profile needs the grader package: run python -m grader.standin") from None

    try:
        profile = load_profile(resolve_profile(spec))
    except ProfileError as exc:
        raise RulesError(str(exc)) from None
    if truth_log is not None:
        try:
            truth_log.open("a", encoding="utf-8").close()
        except OSError as exc:
            raise RulesError(f"{truth_log}: cannot append to the truth log: {exc.strerror}") from None
    return Drifter(replace(profile, rules=rules) if rules is not None else profile, truth_log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.standin",
        description="Loopback stand-in model server (OpenAI chat-completions + Anthropic messages). "
        "Prints its base URL first, serves until SIGTERM/SIGINT.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=0, help="port to listen on (default 0 = any free port)")
    parser.add_argument("--quiet", action="store_true", help="do not log one line per request to stderr")
    parser.add_argument(
        "--rules",
        type=Path,
        default=None,
        metavar="FILE",
        help="answering rules, YAML or .json (default: the bundled rules/standin.yaml, or the profile's)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="play the model a profile describes, drift included (YAML; shipped: baseline, drifted)",
    )
    parser.add_argument(
        "--truth-log",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --profile: append one JSON line per answer (intended label, drift applied) to FILE",
    )
    parser.add_argument(
        "--path-prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help="also answer PREFIX/v1/... as /v1/... (a provider's own path, e.g. /api); repeatable",
    )
    args = parser.parse_args(argv)
    bad = [p for p in args.path_prefix if not p.startswith("/") or p.endswith("/") or "?" in p]
    if bad:
        print(
            f"standin: error: --path-prefix {bad[0]!r}: give a path that starts with / and does not end "
            "with one",
            file=sys.stderr,
        )
        return 2

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        if args.truth_log is not None and args.profile is None:
            raise RulesError("--truth-log needs --profile (the truth it logs is the profile's drift)")
        rules = load_rules(args.rules) if args.rules is not None else None
        drifter = _drifter(args.profile, args.truth_log, rules) if args.profile is not None else None
        if drifter is not None:
            rules = drifter.profile.rules
        server, base_url = make_server(args.host, args.port, rules=rules, log=None if args.quiet else log)
        server.drift = drifter
        server.path_prefixes = tuple(args.path_prefix)
    except RulesError as exc:
        print(f"standin: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(
            f"standin: error: cannot listen on {args.host}:{args.port}: {reason}; "
            "pass another --host or --port (port 0 picks a free one)",
            file=sys.stderr,
        )
        return 2

    def stop(signum: int, frame: object) -> None:
        # shutdown() waits for serve_forever() to return, so it must not run on the serving thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(base_url, flush=True)
    if not args.quiet:
        for line in flavour_settings(base_url):
            log(f"standin: {line}")
    try:
        server.serve_forever(poll_interval=0.1)  # a SIGTERM is answered within a tenth of a second
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
