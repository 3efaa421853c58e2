"""Record model calls once, replay them offline forever: a cassette layer at the HTTP transport boundary.

The tape logic (keys, normalization, redaction, the file format) knows nothing about the HTTP library.
Thin transports adapt it to ``httpx`` (``CassetteTransport``, ``AsyncCassetteTransport``) and to
``httpx2``, the fork the official openai/anthropic SDKs are built on (``CassetteTransport2``,
``AsyncCassetteTransport2``).
Both libraries are imported only when one of their transports is first used, so only one need be installed.

Modes (``CASSETTE_MODE`` when ``mode`` is not given):
  replay       (default) serve ``<dir>/<key>.json``; a missing tape raises ``CassetteMiss``, nothing connects
  record       forward to the real endpoint and write one tape per distinct 2xx request
  passthrough  forward without reading or writing tapes

A transport built without ``mode`` also reads two more variables (an explicit ``mode`` ignores them):
  CASSETTE_DIR=PATH         the tape folder instead of ``<dir>``: replay reads it, record writes tapes and
                            their own ``CHAIN.log`` there
  CASSETTE_REPLAY_UNTIL=N   partial replay, whatever ``CASSETTE_MODE`` says: this process's model calls
                            1..N come from the tapes in ``<dir>`` (a miss is loud, as in replay), the rest go
                            to the endpoint and are recorded into ``CASSETTE_DIR`` (required, and never
                            ``<dir>``). At exit one line goes to stderr:
                            ``model calls: 30 (24 from tape, 6 live), first live call 25``

Prune unused tapes: ``python -m <package>.cassette prune --used FILE [--dir cassettes]``.

On a miss, the error and the miss ledger (``CASSETTE_MISS_LOG``, default ``<dir>/.misses.jsonl``) name the
nearest recorded request and what differs (``messages[1].content: trailing space``): ``nearest_tape`` is
that search, reusable by anything that has to explain a miss.

Every tape written or pruned appends one line to ``<dir>/CHAIN.log``: the tape's key, the sha256 of its
canonical content, the time and the sha256 of the previous line. ``python -m <package>.cassette verify``
walks the chain and checks every tape against it, so an answer edited after it was recorded is named.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# The four transports are module attributes built on first access (see __getattr__ at the end), so they
# are importable by name but not listed here.
__all__ = [
    "Cassette",
    "CassetteMiss",
    "Nearest",
    "key_for",
    "miss_summary",
    "nearest_tape",
    "normalize",
    "prune",
    "request_differences",
    "tape_digest",
    "verify",
]

TAPE_VERSION = 1
MODES = ("replay", "record", "passthrough")
REDACTED = "[REDACTED]"
KEY_LENGTH = 16

# Top-level request fields that identify the caller or the attempt, not the question: two runs that differ
# only in these must share one tape.
_DROPPED_FIELDS = ("user", "metadata", "request_id", "idempotency_key", "stream_options")
# Prompt-caching hints steer the provider's cache, never the answer; they may sit at any depth.
_DROPPED_ANYWHERE = ("cache_control",)
# Only these response headers are kept: the content type (so replay decodes the same way) and the headers
# that say which model/API version answered. Everything else (cookies, request ids, rate limits) is noise.
_KEPT_RESPONSE_HEADERS = (
    "content-type",
    "openai-model",
    "openai-version",
    "anthropic-version",
    "x-model",
)
_CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key")
_CREDENTIAL_ENV_SUFFIXES = ("_API_KEY", "_TOKEN")
# Shorter values are too likely to occur by chance in a prompt ("1", "test") to be replaced blindly.
_MIN_SECRET_LENGTH = 6


class CassetteMiss(LookupError):
    """Replay found no tape for a request. The message names the key, the request, the nearest recorded
    request and how it differs (when there is one), and the fix."""

    def __init__(
        self, key: str, method: str, path: str, cassette_dir: Path, nearest: Nearest | None = None
    ) -> None:
        self.key = key
        self.method = method
        self.path = path
        self.nearest = nearest
        # With no tape at all there is no change to undo: recording is the only way forward.
        near = f"; {nearest.describe()}" if nearest is not None else "; no tape is recorded yet"
        fix = "run `make record`"
        if nearest is not None:
            fix = "run `make record` to record this request (or undo the change, if you made one)"
        super().__init__(
            f"cassette miss: no tape {key} for {method} {path} (expected {cassette_dir / (key + '.json')})"
            f"{near}; {fix}"
        )


# --------------------------------------------------------------------------------------------- keys


def _drop_anywhere(value: Any, names: tuple[str, ...], fired: set[str]) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in names:
                fired.add(k)
                continue
            out[k] = _drop_anywhere(v, names, fired)
        return out
    if isinstance(value, list):
        return [_drop_anywhere(v, names, fired) for v in value]
    return value


def _single_text(content: Any) -> str | None:
    """The text of a content list that is exactly one plain text part, else None."""
    if (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and set(content[0]) == {"type", "text"}
        and content[0]["type"] == "text"
        and isinstance(content[0]["text"], str)
    ):
        return content[0]["text"]
    return None


def normalize(body: Any) -> tuple[Any, list[str]]:
    """Return ``(body used for the key, names of the rules that changed it)``.

    Dropped: ``user``, ``metadata``, ``request_id``/``idempotency_key``, ``stream_options`` (top level) and
    ``cache_control`` (anywhere). Rewritten: content given as one text part hashes like the plain string.
    Everything else, including ``model``, sampling parameters, tools and ``stream``, stays in the key.
    """
    return _normalize(body, deep=True)


def _may_hold_anywhere_fields(raw: bytes) -> bool:
    """False when the JSON text ``raw`` cannot contain a ``_DROPPED_ANYWHERE`` key: it names none of them,
    and a key spelled another way would need a ``\\u`` escape. Then the walk over every nested value, the
    larger part of normalizing, can be skipped."""
    return b"\\u" in raw or any(name.encode() in raw for name in _DROPPED_ANYWHERE)


def _normalize(body: Any, *, deep: bool) -> tuple[Any, list[str]]:
    if not isinstance(body, dict):
        return body, []
    fired: set[str] = set()
    out = {}
    for k, v in body.items():
        if k in _DROPPED_FIELDS:
            fired.add(k)
        else:
            out[k] = v
    if deep:
        out = _drop_anywhere(out, _DROPPED_ANYWHERE, fired)
    if isinstance(out.get("messages"), list):
        messages = []
        for message in out["messages"]:
            if isinstance(message, dict) and _single_text(message.get("content")) is not None:
                message = {**message, "content": _single_text(message["content"])}
                fired.add("content_text_parts")
            messages.append(message)
        out["messages"] = messages
    if _single_text(out.get("system")) is not None:
        out["system"] = _single_text(out["system"])
        fired.add("content_text_parts")
    return out, sorted(fired)


# Built once: ``json.dumps`` with options builds a new encoder on every call.
_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


# Replay serves a stored JSON body as ``record`` lays it out in the tape, whatever the tape's own layout: the
# same bytes for the same reply, and a tape laid out by ``record`` serves its body without parsing it.
_pretty = json.JSONEncoder(indent=2, sort_keys=True, ensure_ascii=False).encode


def _hash(request: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(request).encode("utf-8")).hexdigest()[:KEY_LENGTH]


def _default_path() -> str:
    from ._settings import PROVIDER

    return "/v1/messages" if PROVIDER == "anthropic" else "/v1/chat/completions"


def key_for(payload: dict[str, Any], *, method: str = "POST", path: str | None = None) -> str:
    """The cassette key of a request.

    ``payload`` is either a stored tape request ``{"method", "path", "body"}`` (so anyone can re-hash a tape)
    or a bare request body, sent with ``method`` to ``path`` (default: this project's provider endpoint).
    """
    if set(payload) == {"method", "path", "body"}:
        method, path, body = payload["method"], payload["path"], payload["body"]
    else:
        body = payload
    body, _ = normalize(body)
    return _hash({"method": method.upper(), "path": path or _default_path(), "body": body})


# ---------------------------------------------------------------------------------- nearest on a miss


@dataclass(frozen=True)
class Nearest:
    """The recorded request closest to one that missed, and the fields where they differ."""

    key: str
    path: Path
    differences: tuple[str, ...]  # "messages[1].content: trailing space", sent vs recorded

    def describe(self, shown: int = 3) -> str:
        listed = "; ".join(self.differences[:shown])
        more = len(self.differences) - shown
        tail = f" (and {more} more)" if more > 0 else ""
        return f"nearest recorded: {self.path} differs in {listed}{tail}"


def nearest_tape(cassette_dir: str | os.PathLike[str], request: dict[str, Any]) -> Nearest | None:
    """The tape in ``cassette_dir`` whose stored request is nearest to ``request`` ({method, path, body},
    body normalized as for the key), by canonical-request distance: fewest differing fields, then fewest
    differing characters. None when no readable tape exists."""
    return _nearest(_recorded_requests(Path(cassette_dir)), request)


def _recorded_requests(folder: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    recorded = []
    for path in sorted(folder.glob("*.json")):
        try:
            request = json.loads(path.read_text(encoding="utf-8"))["request"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a tape: the hygiene tooling reports it, a miss message need not
        if isinstance(request, dict) and {"method", "path", "body"} <= set(request):
            recorded.append((path.stem, path, request))
    return recorded


def _nearest(recorded: list[tuple[str, Path, dict[str, Any]]], request: dict[str, Any]) -> Nearest | None:
    best: tuple[tuple[int, int], Nearest] | None = None
    for key, path, stored in recorded:
        found = _differences(request, stored)
        distance = (len(found), sum(weight for _, weight in found))
        if best is None or distance < best[0]:
            best = (distance, Nearest(key, path, tuple(text for text, _ in found)))
    return best[1] if best is not None else None


def request_differences(sent: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    """Where two stored requests ({method, path, body}) differ: ``field: how``, body fields by their path."""
    return [text for text, _ in _differences(sent, recorded)]


def _differences(sent: dict[str, Any], recorded: dict[str, Any]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for name in ("method", "path"):
        if sent.get(name) != recorded.get(name):
            out.append((f"{name}: sent {sent.get(name)!r}, recorded {recorded.get(name)!r}", 1000))
    _diff(sent.get("body"), recorded.get("body"), "", out)
    return out


def _diff(sent: Any, recorded: Any, where: str, out: list[tuple[str, int]]) -> None:
    label = where or "body"
    if isinstance(sent, dict) and isinstance(recorded, dict):
        for k in sorted(set(sent) | set(recorded), key=str):
            inner = f"{where}.{k}" if where else str(k)
            if k not in recorded:
                out.append((f"{inner}: not in the recorded request", _size(sent[k])))
            elif k not in sent:
                out.append((f"{inner}: missing (the recorded request has it)", _size(recorded[k])))
            else:
                _diff(sent[k], recorded[k], inner, out)
        return
    if isinstance(sent, list) and isinstance(recorded, list):
        for i in range(max(len(sent), len(recorded))):
            inner = f"{where}[{i}]"
            if i >= len(recorded):
                out.append((f"{inner}: not in the recorded request", _size(sent[i])))
            elif i >= len(sent):
                out.append((f"{inner}: missing (the recorded request has it)", _size(recorded[i])))
            else:
                _diff(sent[i], recorded[i], inner, out)
        return
    # Compared as canonical JSON, as the key is: 0 and 0.0, or 1 and true, are different requests.
    if _canonical(sent) == _canonical(recorded):
        return
    if isinstance(sent, str) and isinstance(recorded, str):
        how, weight = _text_difference(sent, recorded)
        out.append((f"{label}: {how}", weight))
        return
    out.append((f"{label}: sent {_short(sent)}, recorded {_short(recorded)}", _size(sent) + _size(recorded)))


def _text_difference(sent: str, recorded: str) -> tuple[str, int]:
    weight = abs(len(sent) - len(recorded)) or 1
    for grown, shrunk, suffix in ((sent, recorded, ""), (recorded, sent, " missing")):
        if grown.startswith(shrunk) and grown[len(shrunk) :].isspace():
            return f"trailing {_spaces(grown[len(shrunk) :])}{suffix}", weight
        if grown.endswith(shrunk) and grown[: len(grown) - len(shrunk)].isspace():
            return f"leading {_spaces(grown[: len(grown) - len(shrunk)])}{suffix}", weight
    if sent.split() == recorded.split():
        return "whitespace differs", weight
    if sent.lower() == recorded.lower():
        return "letter case differs", weight
    pairs = list(zip(sent, recorded, strict=False))
    at = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
    start = max(0, at - 10)
    changed = sum(1 for a, b in pairs if a != b) + abs(len(sent) - len(recorded))
    shown = f"sent {sent[start : at + 20]!r}, recorded {recorded[start : at + 20]!r}"
    return f"differs from character {at}: {shown}", changed


def _spaces(text: str) -> str:
    if set(text) == {" "}:
        return "space" if len(text) == 1 else f"{len(text)} spaces"
    if set(text) == {"\n"}:
        return "newline" if len(text) == 1 else f"{len(text)} newlines"
    return f"whitespace {text!r}"


def _short(value: Any, limit: int = 40) -> str:
    text = _canonical(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _size(value: Any) -> int:
    return len(_canonical(value))


def miss_summary(ledger: str | os.PathLike[str], since: int = 0) -> str | None:
    """One line about the misses the ledger gained after byte ``since`` (None when there were none): how
    many, and the commonest differences from the nearest tapes, so a one-space prompt change that made 27
    tests miss reads as one cause."""
    try:
        with open(ledger, "rb") as fh:
            fh.seek(since)
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    if not records:
        return None
    causes: dict[str, int] = {}
    for record in records:
        for difference in record.get("differs") or ["no tape recorded to compare with"]:
            causes[str(difference)] = causes.get(str(difference), 0) + 1
    common = sorted(causes.items(), key=lambda item: (-item[1], item[0]))[:3]
    listed = "; ".join(f"{text} ({count}x)" for text, count in common)
    if all(not record.get("differs") for record in records):
        return f"cassette: {len(records)} miss(es); no tape is recorded yet; run `make record` ({ledger})"
    return (
        f"cassette: {len(records)} miss(es); nearest tapes differ in: {listed}; every miss is in {ledger}; "
        "undo the change or run `make record`"
    )


# --------------------------------------------------------------------------------------------- tapes


@dataclass
class Exchange:
    """One request as the tape logic sees it, independent of the HTTP library."""

    method: str
    path: str
    host: str
    body: Any
    key: str
    normalized: list[str]
    secrets: list[str] = field(default_factory=list)
    live: bool = False  # partial replay: this call goes to the endpoint

    @property
    def stored_request(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "body": self.body}


@dataclass
class Reply:
    """A response to hand back: whole ``content``, or ``events`` to stream one SSE event per chunk."""

    status: int
    headers: dict[str, str]
    content: bytes = b""
    events: list[bytes] | None = None


def _parse_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")


_CHUNK = 1 << 16


def _read_file(path: str) -> bytes:
    """A file's bytes, read without ``open()``'s buffered reader: replay reads one tape per call, and on
    a small file that reader's set-up costs more than the read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        chunks = [os.read(fd, _CHUNK)]
        while len(chunks[-1]) == _CHUNK:  # a regular file reads short only at its end
            chunks.append(os.read(fd, _CHUNK))
        return b"".join(chunks)
    finally:
        os.close(fd)


# How ``record`` lays a tape out (``indent=2``): a top-level key is a line starting with exactly two spaces.
_TOP_LEVEL_RESPONSE = b'\n  "response": '
_DECODER = json.JSONDecoder()
# What follows the top-level response in that layout (sorted keys): only the version, then the tape's end. A
# "response" key nested deeper, laid out to look top-level (JSON ignores indentation), is followed by more
# closing braces: that tape is parsed whole, so replay serves what every JSON reader of the tape sees.
_TAPE_END = re.compile(r',\n  "version": [0-9]+\n\}\n?')


def _stored_response(raw: bytes) -> dict[str, Any]:
    """The ``response`` object of a tape, without parsing the stored request (replay has it already).

    A JSON string cannot hold a raw line break, so in a tape laid out by ``record`` the only line starting
    with two spaces and ``"response":`` is the top-level key. Any other layout is parsed whole.
    """
    start = raw.rfind(_TOP_LEVEL_RESPONSE) if raw.startswith(b'{\n  "') else -1
    if start != -1:
        try:
            # Only the response is decoded from UTF-8 too: the request before it is never read.
            text = raw[start + len(_TOP_LEVEL_RESPONSE) :].decode("utf-8")
            response, end = _DECODER.raw_decode(text)
            if _TAPE_END.fullmatch(text, end):
                return response
        except ValueError:
            pass
    return json.loads(raw.decode("utf-8"))["response"]


# In that layout a JSON reply is ``"response": {"body": ..., "headers": ..., "status": ...}`` (sorted keys),
# the body two levels deep: each of its lines carries four more spaces than ``json.dumps(body, indent=2)``.
_RESPONSE_BODY = _TOP_LEVEL_RESPONSE + b'{\n    "body": '
_AFTER_BODY = b',\n    "headers": '
_BODY_INDENT = b"\n    "


def _stored_json_reply(raw: bytes) -> Reply | None:
    """A JSON reply cut from a tape laid out by ``record``, its body served as the tape holds it (indent 2,
    sorted keys) instead of being parsed and encoded again; None for any other tape or reply.

    The markers are safe for the reason given in ``_stored_response``: only the top-level ``response`` and
    its own ``headers`` key can start a line that way.
    """
    start = raw.rfind(_RESPONSE_BODY) if raw.startswith(b'{\n  "') else -1
    if start == -1:
        return None
    start += len(_RESPONSE_BODY)
    end = raw.find(_AFTER_BODY, start)
    if end == -1 or raw[start : start + 1] not in (b"{", b"["):
        return None
    try:
        tail = "{" + raw[end + 2 :].decode("utf-8")
        rest, used = _DECODER.raw_decode(tail)
    except ValueError:
        return None
    status, headers = rest.get("status"), rest.get("headers")
    if set(rest) != {"headers", "status"} or not isinstance(status, int) or not isinstance(headers, dict):
        return None
    if not _TAPE_END.fullmatch(tail, used):
        return None
    return Reply(status, headers, content=raw[start:end].replace(_BODY_INDENT, b"\n"))


def _reply_from(response: dict[str, Any]) -> Reply:
    headers = response.get("headers") or {}
    if "text" in response:
        if headers.get("content-type", "").startswith("text/event-stream"):
            return Reply(response["status"], headers, events=_sse_events(response["text"]))
        return Reply(response["status"], headers, content=response["text"].encode("utf-8"))
    content = b"" if response.get("body") is None else _pretty(response["body"]).encode("utf-8")
    return Reply(response["status"], headers, content=content)


def _sse_events(text: str) -> list[bytes]:
    events = [e for e in text.replace("\r\n", "\n").split("\n\n") if e.strip()]
    return [(e + "\n\n").encode("utf-8") for e in events]


def _served_model(headers: dict[str, str], body: Any, text: str | None) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        return body["model"]
    if text:
        for line in text.splitlines():
            if not line.startswith("data:"):
                continue
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(event, dict):
                model = event.get("model") or (event.get("message") or {}).get("model")
                if isinstance(model, str):
                    return model
    return headers.get("openai-model") or headers.get("x-model")


def _redact(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {_redact(k, secrets): _redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, secrets) for v in value]
    return value


def _credential_values(headers: dict[str, str]) -> list[str]:
    values = []
    for name in _CREDENTIAL_HEADERS:
        value = headers.get(name, "")
        if name == "authorization" and " " in value:
            value = value.split(" ", 1)[1]
        values.append(value.strip())
    values += [v for k, v in os.environ.items() if k.upper().endswith(_CREDENTIAL_ENV_SUFFIXES)]
    # Longest first, so a key that contains another is replaced whole.
    return sorted({v for v in values if len(v) >= _MIN_SECRET_LENGTH}, key=len, reverse=True)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _append_jsonl(path: Path, record: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    except OSError:
        # A read-only checkout must still replay; the ledger is a diagnostic, the exception is the signal.
        pass


# ------------------------------------------------------------------------------------- partial replay


class _Tally:
    """This process's model calls under ``CASSETTE_REPLAY_UNTIL``: numbered across every transport, since
    "the first N calls" means the process's, not one client's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.armed = False
        self.calls = self.from_tape = self.live = self.missed = 0
        self.first_live: int | None = None

    def arm(self) -> None:
        global _EXIT_HOOKED
        self.armed = True
        if not _EXIT_HOOKED:
            _EXIT_HOOKED = True
            atexit.register(_report_at_exit)

    def take(self, replay_until: int) -> bool:
        """Number the next call; True when it goes live (beyond ``replay_until``)."""
        with self._lock:
            self.calls += 1
            if self.calls <= replay_until:
                return False
            self.live += 1
            if self.first_live is None:
                self.first_live = self.calls
            return True

    def served(self, *, hit: bool) -> None:
        with self._lock:
            if hit:
                self.from_tape += 1
            else:
                self.missed += 1

    def line(self) -> str:
        missed = f", {self.missed} missed" if self.missed else ""
        first = "none" if self.first_live is None else str(self.first_live)
        return (
            f"model calls: {self.calls} ({self.from_tape} from tape, {self.live} live{missed}), "
            f"first live call {first}"
        )


_TALLY = _Tally()
_EXIT_HOOKED = False


def _report_at_exit() -> None:
    if _TALLY.armed:
        stream = sys.__stderr__ or sys.stderr
        stream.write(_TALLY.line() + "\n")
        stream.flush()


def _replay_until(value: str, scratch: str, committed: Path) -> int:
    """``CASSETTE_REPLAY_UNTIL`` checked against ``CASSETTE_DIR``: one line saying what to fix."""
    if not (value.isascii() and value.isdigit()):
        raise ValueError(
            f"CASSETTE_REPLAY_UNTIL={value!r} is not a whole number >= 0 (how many model calls to serve "
            "from tapes before going live)"
        )
    if not scratch:
        raise ValueError(
            f"CASSETTE_REPLAY_UNTIL={value} needs CASSETTE_DIR: a tape folder other than {committed} for the "
            "live calls' tapes"
        )
    if Path(scratch).resolve() == committed.resolve():
        raise ValueError(
            f"CASSETTE_DIR={scratch} is the folder the tapes are replayed from; give CASSETTE_REPLAY_UNTIL "
            "another folder, so the recording is never overwritten"
        )
    return int(value)


class Cassette:
    """The tape logic: key a request, serve it from its tape, or store a recorded reply as a tape.

    ``source`` is where replayed tapes are read, ``dir`` where recorded ones are written: the same folder,
    except under ``CASSETTE_REPLAY_UNTIL`` (tapes from ``cassette_dir``, live calls into ``CASSETTE_DIR``).
    """

    def __init__(self, cassette_dir: str | os.PathLike[str], mode: str | None = None) -> None:
        self.dir = self.source = Path(cassette_dir)
        self.replay_until: int | None = None
        if mode is None:
            scratch = os.environ.get("CASSETTE_DIR", "")
            until = os.environ.get("CASSETTE_REPLAY_UNTIL", "")
            if until:
                self.replay_until = _replay_until(until, scratch, self.source)
                self.dir = Path(scratch)
                mode = "record"  # the path every live call takes
            elif scratch:
                self.dir = self.source = Path(scratch)
        mode = mode if mode is not None else os.environ.get("CASSETTE_MODE", "") or "replay"
        if mode not in MODES:
            raise ValueError(f"CASSETTE_MODE={mode!r} is not a mode; use one of: {', '.join(MODES)}")
        self.mode = mode
        # The recorded requests, read on the first miss only: a hit never pays for them.
        self._recorded: list[tuple[str, Path, dict[str, Any]]] | None = None
        if self.replay_until is not None:
            _TALLY.arm()

    @property
    def forwards(self) -> bool:
        """Whether requests may reach the endpoint (under ``CASSETTE_REPLAY_UNTIL``: those beyond N)."""
        return self.mode in ("record", "passthrough")

    def goes_live(self, exchange: Exchange) -> bool:
        """Whether this request is sent to the endpoint rather than served from a tape."""
        return exchange.live if self.replay_until is not None else self.forwards

    def exchange(self, method: str, path: str, host: str, body: bytes, headers: dict[str, str]) -> Exchange:
        parsed = _parse_body(body)
        normalized, fired = _normalize(parsed, deep=_may_hold_anywhere_fields(body))
        stored = {"method": method.upper(), "path": path, "body": normalized}
        secrets = []
        if self.mode == "record":  # only a tape being written needs the credentials, to redact them
            secrets = _credential_values({k.lower(): v for k, v in headers.items()})
        return Exchange(
            method=method.upper(),
            path=path,
            host=host,
            body=normalized,
            key=_hash(stored),
            normalized=fired,
            secrets=secrets,
            live=self.replay_until is not None and _TALLY.take(self.replay_until),
        )

    def tape_path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def replay(self, exchange: Exchange) -> Reply:
        try:
            raw = _read_file(f"{self.source}/{exchange.key}.json")
        except FileNotFoundError:
            if self.replay_until is not None:
                _TALLY.served(hit=False)
            nearest = self._nearest(exchange)
            self._log_miss(exchange, nearest)
            raise CassetteMiss(exchange.key, exchange.method, exchange.path, self.source, nearest) from None
        if self.replay_until is not None:
            _TALLY.served(hit=True)
        reply = _stored_json_reply(raw) or _reply_from(_stored_response(raw))
        self._log_used(exchange.key)
        return reply

    def record(self, exchange: Exchange, status: int, headers: dict[str, str], content: bytes) -> Reply:
        """Store a forwarded reply (2xx only) and return it for the caller, streamed again if it was SSE."""
        kept = {k: v for k, v in ((k.lower(), v) for k, v in headers.items()) if k in _KEPT_RESPONSE_HEADERS}
        is_sse = kept.get("content-type", "").startswith("text/event-stream")
        text = content.decode("utf-8", errors="replace") if is_sse else None
        reply = Reply(status, kept, content=b"" if is_sse else content)
        if is_sse:
            reply.events = _sse_events(text or "")
        if self.mode != "record" or not 200 <= status < 300:
            return reply
        response: dict[str, Any] = {"status": status, "headers": kept}
        body = None
        if is_sse:
            response["text"] = text
        else:
            try:
                body = json.loads(content) if content else None
                response["body"] = body
            except ValueError:
                response["text"] = content.decode("utf-8", errors="replace")
        model = exchange.body.get("model") if isinstance(exchange.body, dict) else None
        tape = {
            "version": TAPE_VERSION,
            "key": exchange.key,
            "request": exchange.stored_request,
            "response": response,
            "meta": {
                "model": model,
                "served_model": _served_model(kept, body, text),
                "provider": "anthropic" if exchange.path.split("?")[0].endswith("/messages") else "openai",
                "endpoint": exchange.host,
                "recorded_at": _now(),
                "normalized": exchange.normalized,
            },
        }
        tape = _redact(tape, exchange.secrets)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.tape_path(exchange.key).write_text(
            json.dumps(tape, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        chain_written(self.dir, exchange.key, tape_digest(tape))
        self._log_used(exchange.key)
        return reply

    def _nearest(self, exchange: Exchange) -> Nearest | None:
        if self._recorded is None:
            self._recorded = _recorded_requests(self.source)
        return _nearest(self._recorded, exchange.stored_request)

    def _log_miss(self, exchange: Exchange, nearest: Nearest | None = None) -> None:
        ledger = os.environ.get("CASSETTE_MISS_LOG") or str(self.dir / ".misses.jsonl")
        record = {
            "key": exchange.key,
            "method": exchange.method,
            "path": exchange.path,
            "time": _now(),
            "nearest": nearest.key if nearest is not None else None,
            "differs": list(nearest.differences) if nearest is not None else [],
        }
        _append_jsonl(Path(ledger), record)

    def _log_used(self, key: str) -> None:
        used = os.environ.get("CASSETTE_USED_LOG")
        if used:
            _append_jsonl(Path(used), {"key": key})


# ---------------------------------------------------------------------------------------- transports


def _build_transports(lib: Any) -> tuple[type, type]:
    """Transport classes for ``httpx`` or its API-identical fork ``httpx2``."""

    def _exchange(cassette: Cassette, request: Any) -> Exchange:
        # Replay never looks at the headers (they are not in the key): copy them only when recording.
        headers = dict(request.headers) if cassette.mode == "record" else {}
        return cassette.exchange(
            request.method, request.url.raw_path.decode("ascii"), request.url.host, request.content, headers
        )

    def _response(reply: Reply, request: Any, *, asynchronous: bool) -> Any:
        if reply.events is None:
            return lib.Response(reply.status, headers=reply.headers, content=reply.content, request=request)
        events = reply.events
        if asynchronous:

            async def agen() -> AsyncIterator[bytes]:
                for event in events:
                    yield event

            return lib.Response(reply.status, headers=reply.headers, content=agen(), request=request)

        def gen() -> Iterator[bytes]:
            yield from events

        return lib.Response(reply.status, headers=reply.headers, content=gen(), request=request)

    class _Sync(lib.BaseTransport):
        def __init__(
            self, cassette_dir: str | os.PathLike[str], *, mode: str | None = None, inner: Any = None
        ) -> None:
            self.cassette = Cassette(cassette_dir, mode)
            self._inner = inner

        @property
        def inner(self) -> Any:
            # Built on first use, so replay never even constructs a connection pool.
            if self._inner is None:
                self._inner = lib.HTTPTransport()
            return self._inner

        def handle_request(self, request: Any) -> Any:
            request.read()
            exchange = _exchange(self.cassette, request)
            if not self.cassette.goes_live(exchange):
                return _response(self.cassette.replay(exchange), request, asynchronous=False)
            response = self.inner.handle_request(request)
            try:
                content = response.read()
            finally:
                response.close()
            reply = self.cassette.record(exchange, response.status_code, dict(response.headers), content)
            return _response(reply, request, asynchronous=False)

        def close(self) -> None:
            if self._inner is not None:
                self._inner.close()

    class _Async(lib.AsyncBaseTransport):
        def __init__(
            self, cassette_dir: str | os.PathLike[str], *, mode: str | None = None, inner: Any = None
        ) -> None:
            self.cassette = Cassette(cassette_dir, mode)
            self._inner = inner

        @property
        def inner(self) -> Any:
            if self._inner is None:
                self._inner = lib.AsyncHTTPTransport()
            return self._inner

        async def handle_async_request(self, request: Any) -> Any:
            await request.aread()
            exchange = _exchange(self.cassette, request)
            if not self.cassette.goes_live(exchange):
                return _response(self.cassette.replay(exchange), request, asynchronous=True)
            response = await self.inner.handle_async_request(request)
            try:
                content = await response.aread()
            finally:
                await response.aclose()
            reply = self.cassette.record(exchange, response.status_code, dict(response.headers), content)
            return _response(reply, request, asynchronous=True)

        async def aclose(self) -> None:
            if self._inner is not None:
                await self._inner.aclose()

    return _Sync, _Async


_TRANSPORTS = {
    "CassetteTransport": ("httpx", 0),
    "AsyncCassetteTransport": ("httpx", 1),
    "CassetteTransport2": ("httpx2", 0),
    "AsyncCassetteTransport2": ("httpx2", 1),
}


def __getattr__(name: str) -> Any:
    if name not in _TRANSPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, index = _TRANSPORTS[name]
    import importlib

    classes = _build_transports(importlib.import_module(module_name))
    for other, (other_module, other_index) in _TRANSPORTS.items():
        if other_module == module_name:
            cls = classes[other_index]
            cls.__name__ = cls.__qualname__ = other
            globals()[other] = cls  # cached: later lookups never reach __getattr__
    return globals()[name]


# ---------------------------------------------------------------------------------------------- prune


def prune(cassette_dir: Path, used_log: Path) -> list[tuple[Path, str]]:
    """Delete tapes no test used, and duplicates of a tape that is named by its key. Returns what went."""
    if not used_log.is_file():
        raise SystemExit(f"prune: {used_log} not found; run `make record` first (it writes the used log)")
    used = set()
    for number, line in enumerate(used_log.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            used.add(json.loads(line)["key"])
        except (ValueError, KeyError, TypeError):
            raise SystemExit(
                f"prune: {used_log}:{number}: not a JSON line with a key; delete the file"
            ) from None
    if not used:
        raise SystemExit(f"prune: {used_log} lists no tapes; refusing to delete every tape")
    removed = []
    for path in sorted(cassette_dir.glob("*.json")):
        try:
            real_key = key_for(json.loads(path.read_text(encoding="utf-8"))["request"])
        except (ValueError, KeyError, TypeError, AttributeError):
            real_key = None
        if real_key and real_key != path.stem and (cassette_dir / f"{real_key}.json").exists():
            reason = f"duplicate of {real_key}.json"
        elif path.stem not in used:
            reason = "unused"
        else:
            continue
        digest = _file_digest(path)
        path.unlink()
        chain_removed(cassette_dir, path.stem, digest, reason)
        removed.append((path, reason))
    return removed


# ---------------------------------------------------------------------------------------------- chain

CHAIN_FILE = "CHAIN.log"
_GENESIS = "0" * 64
_CHAIN_OPS = ("record", "rerecord", "prune")


def tape_digest(tape: Any) -> str:
    """sha256 of a tape's canonical JSON (sorted keys, compact): the same for any layout of the same tape."""
    return hashlib.sha256(_canonical(tape).encode("utf-8")).hexdigest()


def _file_digest(path: Path) -> str | None:
    try:
        return tape_digest(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def _line_hash(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


@dataclass
class _ChainState:
    """The chain as read: its head, every tape it holds now (key -> (digest, line)) and the broken lines."""

    head: str = _GENESIS
    lines: int = 0
    tapes: dict[str, tuple[str, int]] = field(default_factory=dict)
    broken: list[tuple[int, str]] = field(default_factory=list)  # (line, message)


def _read_chain(path: Path) -> _ChainState:
    state = _ChainState()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return state
    for number, line in enumerate(text.splitlines(), 1):
        state.lines = number
        try:
            entry = json.loads(line)
            op, tape, prev = entry["op"], entry["tape"], entry["prev"]
            if op not in _CHAIN_OPS or not isinstance(tape, str) or (op != "prune" and not entry["sha256"]):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            state.broken.append((number, "not a chain entry (a JSON object with op, tape, prev, sha256)"))
            state.head = _line_hash(line)
            continue
        if prev != state.head:
            state.broken.append(
                (
                    number,
                    f"does not follow the line before it (a line edited, removed or inserted); tape {tape}",
                )
            )
        state.head = _line_hash(line)
        if op == "prune":
            state.tapes.pop(tape, None)
        else:
            state.tapes[tape] = (entry["sha256"], number)
    return state


def _chain_append(cassette_dir: Path, entry: dict[str, Any], *, unless_same: bool = False) -> None:
    """Append ``entry`` linked to the chain's last line, locked so concurrent recorders stay in order."""
    path = cassette_dir / CHAIN_FILE
    cassette_dir.mkdir(parents=True, exist_ok=True)
    with path.open("a+", encoding="utf-8") as fh:
        try:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        except ImportError:  # Windows: one recorder at a time
            pass
        state = _read_chain(path)
        current = state.tapes.get(entry["tape"])
        if unless_same and current is not None and current[0] == entry.get("sha256"):
            return  # the same tape written again: nothing changed, nothing to chain
        if entry["op"] == "record" and current is not None:
            entry = {**entry, "op": "rerecord", "replaced": current[0]}
        line = _canonical({**entry, "at": _now(), "prev": state.head})
        fh.seek(0, os.SEEK_END)
        fh.write(line + "\n")


def chain_written(cassette_dir: Path, key: str, digest: str) -> None:
    """Chain a tape just written: ``record``, or ``rerecord`` naming the digest it replaced."""
    _chain_append(Path(cassette_dir), {"op": "record", "tape": key, "sha256": digest}, unless_same=True)


def chain_removed(cassette_dir: Path, key: str, digest: str | None, reason: str) -> None:
    """Chain a tape just deleted, with why and what it held."""
    _chain_append(Path(cassette_dir), {"op": "prune", "tape": key, "removed": digest, "reason": reason})


@dataclass
class Verdict:
    """What ``verify`` found: ``problems`` are ``file:line: message`` lines, the first broken line first."""

    tapes: int
    head: str
    problems: list[str]


def verify(cassette_dir: str | os.PathLike[str]) -> Verdict:
    """Walk the chain end to end, then hold every tape in ``cassette_dir`` to its last chain entry."""
    folder = Path(cassette_dir)
    chain = folder / CHAIN_FILE
    state = _read_chain(chain)
    problems = [f"{chain}:{number}: {message}" for number, message in state.broken]
    on_disk = {p.stem: p for p in sorted(folder.glob("*.json")) if p.is_file() and not p.is_symlink()}
    if on_disk and not chain.is_file():
        problems.append(f"{chain}: missing, so no tape is covered; re-record with `make record` to start it")
        return Verdict(len(on_disk), "none", problems)
    for key, path in on_disk.items():
        if key not in state.tapes:
            problems.append(
                f"{path}:1: tape {key} is not in the chain ({chain}): written outside `make record`, "
                "or its chain line was removed"
            )
            continue
        digest, number = state.tapes[key]
        if _file_digest(path) != digest:
            problems.append(
                f"{path}:1: tape {key} was edited after it was recorded: its content does not match "
                f"{chain}:{number}"
            )
    for key, (_digest, number) in sorted(state.tapes.items(), key=lambda item: item[1][1]):
        if key not in on_disk:
            missing = folder / f"{key}.json"
            problems.append(f"{chain}:{number}: names tape {key}, which is missing ({missing})")
    head = state.head[:KEY_LENGTH] if state.lines else "none"
    return Verdict(len(on_disk), head, problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.cassette")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prune", help="delete tapes not in the used log, and duplicates")
    p.add_argument("--used", required=True, type=Path, help="the used log written under CASSETTE_USED_LOG")
    p.add_argument("--dir", default=Path("cassettes"), type=Path, help="the cassette directory")
    v = sub.add_parser("verify", help=f"check {CHAIN_FILE} end to end and every tape against it")
    v.add_argument("--dir", default=Path("cassettes"), type=Path, help="the cassette directory")
    args = parser.parse_args(argv)
    if args.command == "verify":
        verdict = verify(args.dir)
        for problem in verdict.problems:
            print(f"verify: {problem}", file=sys.stderr)
        if verdict.problems:
            return 1
        print(f"ok ({verdict.tapes} tapes, head {verdict.head})")
        return 0
    try:
        removed = prune(args.dir, args.used)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    for path, reason in removed:
        print(f"removed {path} ({reason})")
    print(f"prune: {len(removed)} removed, {len(list(args.dir.glob('*.json')))} kept")
    return 0


if __name__ == "__main__":
    sys.exit(main())
