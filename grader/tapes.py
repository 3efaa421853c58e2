"""Read a submission's recorded tapes, whatever recorder wrote them, without running its code.

Formats understood: the kit's own JSON file (version 1, one request per file), vcrpy / pytest-recording
cassettes (YAML or JSON, gzip bodies included) and, best effort, generic JSON lists of request/response
records (HAR included). Anything else that sits where tapes live is reported as ``format="invalid"`` with
the reason and, when the parser gives one, the line — never a crash, never a traceback.

Safety: symlinks are never followed (a linked tape is reported invalid, "symlink", and never opened), a
file larger than ``MAX_PARSE_BYTES`` is sized but not parsed, and compressed bodies are inflated with a cap.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import re
import stat
import zlib
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml

from grader import walk
from grader._json import mapping
from grader.manifest import CASSETTE_DIR_CANDIDATES
from grader.recordings import Found, RecordParts, find_metadata, is_record, split_record
from grader.safeio import read_bytes

if TYPE_CHECKING:
    from grader.context import Context

__all__ = [
    "DISCOVERY_DIRS",
    "MAX_PARSE_BYTES",
    "TAPE_SUFFIXES",
    "Interaction",
    "Tape",
    "canonical_key",
    "canonical_request_json",
    "is_tape_file",
    "load_tapes",
    "sniff_tape",
    "tapes_of",
]

# A tape this large is not a tape a stranger can review; sizing it is enough to score hygiene.
MAX_PARSE_BYTES = 16 * 1024 * 1024
# Inflated bodies are capped too: a small gzip body can expand to gigabytes.
_MAX_INFLATED_BYTES = 32 * 1024 * 1024
TAPE_SUFFIXES = (".json", ".yaml", ".yml", ".jsonl", ".ndjson")


def is_tape_file(path: Path) -> bool:
    """A file a probe withholds from the cassette folder: any tape format, compressed too (by its name)."""
    return path.name.lower().endswith((*TAPE_SUFFIXES, ".gz"))


# Where tapes are looked for when no cassette_dir is known: the manifest's discovery list, one source.
DISCOVERY_DIRS = CASSETTE_DIR_CANDIDATES
_OUTSIDE = "outside the repository"

_GEMINI_MODEL = re.compile(r"/models/([^/:?]+)(?::|$|/|\?)")
_SSE_MODEL = re.compile(r'"model"\s*:\s*"([^"\\]{1,200})"')


@dataclass
class Interaction:
    """One request/response pair as stored; bodies parsed as JSON when they are JSON."""

    method: str | None = None
    url: str | None = None  # full URI when the recorder stored one (vcrpy); None for the kit's format
    path: str | None = None
    request_body: Any = None
    request_headers: dict[str, list[str]] = field(default_factory=dict)  # lower-case name -> values
    status: int | None = None
    response_headers: dict[str, list[str]] = field(default_factory=dict)
    response_body: Any = None
    response_text: str | None = None  # a streamed (SSE) or otherwise non-JSON reply
    line: int | None = None  # 1-based line where the interaction starts in its file, when known
    # Hand-rolled records: metadata found by meaning (grader/recordings.py), name -> (value, where)
    found: dict[str, Found] = field(default_factory=dict)

    @property
    def model(self) -> str | None:
        """The model the request asked for: body ``model``, else the Gemini-style URL path."""
        if isinstance(self.request_body, dict) and isinstance(self.request_body.get("model"), str):
            return str(self.request_body["model"])
        match = _GEMINI_MODEL.search(self.path or "")
        return match.group(1) if match else None

    @property
    def served_model(self) -> str | None:
        """The model the response says answered (JSON body, or the first ``"model"`` in a stream)."""
        if isinstance(self.response_body, dict) and isinstance(self.response_body.get("model"), str):
            return str(self.response_body["model"])
        if isinstance(self.response_body, dict) and isinstance(self.response_body.get("modelVersion"), str):
            return str(self.response_body["modelVersion"])  # Gemini names the served model here
        if self.response_text:
            match = _SSE_MODEL.search(self.response_text[:200_000])
            if match:
                return match.group(1)
        return None


@dataclass
class Tape:
    """One tape file. ``format`` is "kit" | "vcr" | "json" | "invalid" (then ``error`` says why)."""

    path: str  # repo-relative, POSIX separators; undecodable bytes shown as \\x escapes
    format: str
    interactions: list[Interaction] = field(default_factory=list)
    model: str | None = None
    served_model: str | None = None
    endpoint: str | None = None
    recorded_at: str | None = None
    error: str | None = None
    size: int = 0  # bytes on disk (counted even when too large to parse; 0 for a symlink)
    key: str | None = None  # kit format: the "key" field as stored
    meta: dict[str, Any] = field(default_factory=dict)  # kit format: the "meta" object as stored
    text: str = field(default="", repr=False)  # decoded file text (empty when not read)
    # Where each of model, served_model, endpoint, recorded_at was read ("meta.recorded_at", "request URL")
    sources: dict[str, str] = field(default_factory=dict)

    def find_line(self, needle: str, start: int = 1) -> int | None:
        """1-based number of the first line at or after ``start`` containing ``needle`` (case-insensitive)."""
        low = needle.lower()
        for number, line in enumerate(self.text.splitlines(), 1):
            if number >= start and low in line.lower():
                return number
        return None


def canonical_request_json(method: Any, path: Any, body: Any) -> str:
    """The canonical JSON the kit hashes: sorted keys, compact separators, UTF-8 kept as is."""
    return json.dumps(
        {"method": method, "path": path, "body": body},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def canonical_key(method: Any, path: Any, body: Any) -> str:
    """Full sha256 hex digest of the canonical request; a tape's key is a prefix (>= 16 chars) of it."""
    data = canonical_request_json(method, path, body).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def load_tapes(repo: Path, cassette_dir: Path | None) -> list[Tape]:
    """Every tape under ``cassette_dir`` (recursive), or under the discovery folders when none is declared.

    ``cassette_dir`` is repo-relative (an absolute path inside the repo is accepted). The result is sorted by
    path. Nothing outside the repository is read, and no symlink is followed.
    """
    repo = Path(repo)
    roots: list[Path] = []
    if cassette_dir is not None:
        rel = Path(cassette_dir)
        if rel.is_absolute():
            try:
                rel = rel.relative_to(repo)
            except ValueError:
                return [
                    Tape(path=_display(str(cassette_dir)), format="invalid", error="outside the repository")
                ]
        roots.append(rel)
    else:
        roots.extend(Path(d) for d in DISCOVERY_DIRS)

    tapes: dict[str, Tape] = {}
    spent = [0]  # values the tapes parsed so far may hold (`_values_bound`), against `_MAX_TOTAL_VALUES`
    for rel in roots:
        if ".." in rel.parts:
            tapes[rel.as_posix()] = Tape(
                path=rel.as_posix(), format="invalid", error="outside the repository"
            )
            continue
        linked = _linked_component(repo, rel)
        if linked is not None:
            shown = _display(linked.as_posix())
            tapes[shown] = Tape(path=shown, format="invalid", error="symlink (not followed)")
            continue
        base = repo / rel
        if not base.is_dir():
            continue
        for path in _walk(base):
            tape = _load_one(repo, path, spent)
            tapes.setdefault(tape.path, tape)
    return sorted(tapes.values(), key=lambda t: t.path)


def sniff_tape(repo: Path, path: Path, *, max_bytes: int) -> bool:
    """Whether ``path`` (a regular file no larger than ``max_bytes``) parses as a recording."""
    try:
        info = path.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes or info.st_size == 0:
        return False
    tape = _load_one(repo, path)
    return tape.format != "invalid" and bool(tape.interactions)


def _display(name: str) -> str:
    """A printable form of a file name whose bytes may not be UTF-8."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _linked_component(repo: Path, rel: Path) -> Path | None:
    """The first component of ``rel`` that is a symlink, or None."""
    current = Path()
    for part in rel.parts:
        current = current / part
        if (repo / current).is_symlink():
            return current
    return None


def _walk(base: Path) -> list[Path]:
    """Tape files below ``base``, and links where a tape or a folder of tapes could be (each reported as an
    invalid "symlink" tape, never followed)."""
    return [
        path
        for path in walk.files(base, links=True)
        if path.name.lower().endswith(TAPE_SUFFIXES) or (path.is_symlink() and path.is_dir())
    ]


def _load_one(repo: Path, path: Path, spent: list[int] | None = None) -> Tape:
    rel = _display(path.relative_to(repo).as_posix())
    try:
        info = path.lstat()
    except OSError as exc:
        return Tape(path=rel, format="invalid", error=f"cannot stat: {exc.strerror}")
    if stat.S_ISLNK(info.st_mode):
        return Tape(path=rel, format="invalid", error="symlink (not followed)")
    if not stat.S_ISREG(info.st_mode):
        return Tape(path=rel, format="invalid", error="not a regular file")
    if info.st_size > MAX_PARSE_BYTES:
        return Tape(
            path=rel,
            format="invalid",
            size=info.st_size,
            error=f"too large to parse ({info.st_size / 1e6:.1f} MB > {MAX_PARSE_BYTES / 1e6:.0f} MB cap)",
        )
    try:
        # No link (the file or a folder above it), no FIFO, capped: a file swapped since lstat is refused.
        raw = read_bytes(path, cap=MAX_PARSE_BYTES + 1, root=repo, truncate=True)
    except OSError as exc:
        return Tape(path=rel, format="invalid", size=info.st_size, error=f"cannot read: {exc.strerror}")
    if len(raw) > MAX_PARSE_BYTES:
        return Tape(path=rel, format="invalid", size=len(raw), error="too large to parse (grew while read)")
    text = raw.decode("utf-8", "replace")  # a stray Latin-1 byte must not hide the rest of the tape
    bound = _values_bound(text)
    if spent is not None and bound <= _MAX_VALUES:  # a tape over the cap is refused by `_parse`, unparsed
        spent[0] += bound
        if spent[0] > _MAX_TOTAL_VALUES:
            error = (
                f"not parsed: the tapes read before it may hold {_MAX_TOTAL_VALUES:,} values, "
                "the most one grade parses"
            )
            return Tape(path=rel, format="invalid", size=info.st_size, error=error)
    tape = _parse(rel, text)
    tape.size = info.st_size
    tape.text = text
    return tape


def _json_lines(text: str) -> list[Any]:
    """A JSON-lines file: one JSON value per non-empty line (a bad line raises like json.loads)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _parse(rel: str, text: str) -> Tape:
    if _values_bound(text) > _MAX_VALUES:
        return Tape(path=rel, format="invalid", error=f"holds more than {_MAX_VALUES:,} values: not parsed")
    lower = rel.lower()
    is_yaml = lower.endswith((".yaml", ".yml"))
    lines = lower.endswith((".jsonl", ".ndjson"))
    try:
        if is_yaml:
            data = yaml.load(text, Loader=_Loader)  # noqa: S506 (safe loader)
            if "&" in text and _expanded(data) > _MAX_EXPANDED:
                # Aliases are shared, not copied, when loaded; every reader that walks the values (a
                # re-hash, a scan) expands them: 1.5 KB of anchors is 10^9 values (red team 11).
                return Tape(path=rel, format="invalid", error="YAML aliases expand past 1,000,000 values")
        else:
            data = _json_lines(text) if lines else json.loads(text)
    except json.JSONDecodeError as exc:
        return Tape(path=rel, format="invalid", error=f"invalid JSON at line {exc.lineno}: {exc.msg}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return Tape(path=rel, format="invalid", error=f"invalid YAML{where}: {problem}")
    except (ValueError, RecursionError) as exc:
        return Tape(path=rel, format="invalid", error=f"unreadable: {str(exc).splitlines()[0][:200]}")

    if (
        isinstance(data, dict)
        and "request" in data
        and "version" in data
        and isinstance(data["request"], dict)
    ):
        tape = _kit(rel, data)
    elif isinstance(data, dict) and isinstance(data.get("interactions"), list) and _vcr_shaped(data):
        tape = _vcr(rel, data["interactions"], text)
    else:
        records = _generic_records(data)
        if records is None:
            return Tape(
                path=rel, format="invalid", error="not a request/response record (unrecognised shape)"
            )
        tape = Tape(path=rel, format="json", interactions=records)
    _fill_from_interactions(tape)
    return tape


_MAX_EXPANDED = 1_000_000
# What a tape costs the grader is what it parses into, not its bytes (red team 12, F4: a 15 MB JSON tape of
# `[{},{},...]` held 450 MB of the grader's own memory, 5 million dicts). Every value but a container's
# first follows a comma (JSON, YAML flow) or starts a line (YAML block), and every container opens with a
# bracket: their count bounds the values a text can parse into. Honest tapes are far below both caps (a
# chat completion, a few hundred; a 16 MB prose body, ~300,000 commas).
_MAX_VALUES = 1_000_000
_MAX_TOTAL_VALUES = 5_000_000


def _values_bound(text: str) -> int:
    return sum(text.count(c) for c in ",{[\n")


def _expanded(data: Any) -> int:
    """How many values ``data`` holds once every alias is expanded (each shared node counted where it is
    named), computed once per node however often it is named."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if isinstance(node, dict):
            total = 1 + sum(size(k) + size(v) for k, v in node.items())
        elif isinstance(node, list):
            total = 1 + sum(size(v) for v in node)
        else:
            total = 1
        sizes[key] = total
        return total

    return size(data)


# libyaml's safe loader when present: pure-Python YAML parsing is ~20x slower on multi-MB cassettes.
_SafeBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeBase):  # type: ignore[misc]  # the base is chosen at import time (C or Python)
    """The safe loader (which already decodes ``!!binary``) without timestamp magic: dates stay strings."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _kit(rel: str, data: dict[str, Any]) -> Tape:
    req = mapping(data.get("request"))
    resp = mapping(data.get("response"))
    meta = mapping(data.get("meta"))
    inter = Interaction(
        method=_str(req.get("method")),
        path=_str(req.get("path")),
        request_body=req.get("body"),
        request_headers=_headers(req.get("headers")),
        status=_int(resp.get("status")),
        response_headers=_headers(resp.get("headers")),
        response_body=resp.get("body"),
        response_text=_str(resp.get("text")),
        line=1,
    )
    return Tape(
        path=rel,
        format="kit",
        interactions=[inter],
        model=_str(meta.get("model")),
        served_model=_str(meta.get("served_model")),
        endpoint=_str(meta.get("endpoint")),
        recorded_at=_str(meta.get("recorded_at")),
        key=_str(data.get("key")),
        meta=meta,
    )


def _vcr(rel: str, items: list[Any], text: str) -> Tape:
    starts = [n for n, line in enumerate(text.splitlines(), 1) if re.match(r"^\s*-\s+request:", line)]
    interactions = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        req = mapping(item.get("request"))
        resp = mapping(item.get("response"))
        uri = _str(req.get("uri")) or _str(req.get("url"))
        status = resp.get("status")
        code = status.get("code") if isinstance(status, dict) else status
        resp_headers = _headers(resp.get("headers"))
        raw_body = resp.get("body")
        if isinstance(raw_body, dict):
            raw_body = raw_body.get("string", raw_body.get("base64_string"))
        body, body_text = _decode_body(raw_body, resp_headers)
        req_body, _ = _decode_body(req.get("body"), _headers(req.get("headers")))
        interactions.append(
            Interaction(
                method=_str(req.get("method")),
                url=uri,
                path=urlsplit(uri).path if uri else None,
                request_body=req_body,
                request_headers=_headers(req.get("headers")),
                status=_int(code),
                response_headers=resp_headers,
                response_body=body,
                response_text=body_text,
                line=starts[index] if index < len(starts) else None,
            )
        )
    return Tape(path=rel, format="vcr", interactions=interactions)


def _vcr_shaped(data: dict[str, Any]) -> bool:
    """vcrpy's layout: each interaction's request has a ``uri`` (or ``url``) and a method."""
    items = [i for i in data["interactions"] if isinstance(i, dict)]
    if not items:
        return True  # an empty vcrpy cassette
    req = items[0].get("request")
    return isinstance(req, dict) and ("uri" in req or "url" in req) and "method" in req


def _generic_records(data: Any) -> list[Interaction] | None:
    """Hand-rolled JSON: a record, a list of records (JSON lines too), a dict holding a list of them, a dict
    of records by key, or HAR. Names are read by meaning (grader/recordings.py)."""
    outer: dict[str, Any] = {}
    if isinstance(data, dict):
        if isinstance(data.get("log"), dict) and isinstance(data["log"].get("entries"), list):
            data = data["log"]["entries"]  # HAR
        elif is_record(data):
            data = [data]
        else:
            lists = [v for v in data.values() if isinstance(v, list) and v and is_record(v[0])]
            if lists:
                outer = {k: v for k, v in data.items() if not isinstance(v, (list, dict))}
                data = lists[0]
            elif data and all(is_record(v) for v in data.values()):
                data = list(data.values())  # {"<key>": record, ...}
            else:
                return None
    if not isinstance(data, list) or not data or not all(is_record(x) for x in data):
        return None
    if not all(isinstance(x.get("request"), dict) and "response" in x for x in data):
        return [_from_parts(item, outer) for item in data]
    out = []
    for item in data:
        req = mapping(item.get("request"))
        resp = mapping(item.get("response"))
        uri = _str(req.get("url")) or _str(req.get("uri"))
        path = _str(req.get("path")) or (urlsplit(uri).path if uri else None)
        req_body = req.get("body", req.get("json"))
        if req_body is None and isinstance(req.get("postData"), dict):
            req_body = req["postData"].get("text")
        resp_headers = _headers(resp.get("headers"))
        resp_body = resp.get("body", resp.get("json"))
        if resp_body is None and isinstance(resp.get("content"), dict):
            resp_body = resp["content"].get("text")
        body, text = _decode_body(resp_body, resp_headers)
        req_parsed, _ = _decode_body(req_body, {})
        inter = Interaction(
            method=_str(req.get("method")),
            url=uri,
            path=path,
            request_body=req_parsed,
            request_headers=_headers(req.get("headers")),
            status=_int(resp.get("status", resp.get("status_code"))),
            response_headers=resp_headers,
            response_body=body,
            response_text=_str(resp.get("text")) or text,
        )
        parts = split_record(item)
        if parts is not None:
            if inter.request_body is None and parts.request_body is not None:
                inter.request_body, _ = _decode_body(parts.request_body, {})
            if inter.response_body is None and inter.response_text is None:
                inter.response_body, inter.response_text = _response(parts, resp_headers)
            inter.found = find_metadata(parts, outer)
        out.append(inter)
    return out


def _from_parts(item: dict[str, Any], outer: dict[str, Any]) -> Interaction:
    """A record whose parts have other names (``req_json``, ``request_body``, ``resp``...)."""
    parts = split_record(item)
    assert parts is not None  # checked by the caller
    found = find_metadata(parts, outer)
    req, resp = parts.request, parts.response
    headers = _headers(resp.get("headers") or item.get("response_headers") or item.get("resp_headers"))
    uri = _str(req.get("url")) or _str(req.get("uri"))
    uri = uri or _str(item.get("request_url")) or _str(item.get("url"))
    path = _str(req.get("path")) or _str(item.get("path")) or (urlsplit(uri).path if uri else None)
    body, text = _response(parts, headers)
    status = resp.get("status", resp.get("status_code", item.get("status", item.get("status_code"))))
    return Interaction(
        method=_str(req.get("method")) or _str(item.get("method")),
        url=uri,
        path=path,
        request_body=_decode_body(parts.request_body, {})[0],
        request_headers=_headers(req.get("headers") or item.get("request_headers")),
        status=_int(status),
        response_headers=headers,
        response_body=body,
        response_text=text,
        found=found,
    )


def _response(parts: RecordParts, headers: dict[str, list[str]]) -> tuple[Any, str | None]:
    if parts.response_events is not None:
        # A stored event stream: keep it as text, so what it names (the served model) stays findable.
        return None, "\n".join(json.dumps(e, sort_keys=True, default=str) for e in parts.response_events)
    return _decode_body(parts.response_body, headers)


def _fill_from_interactions(tape: Tape) -> None:
    """Tape-level model, endpoint and time: the first interaction that names each wins; each remembers
    where it was read (``tape.sources``)."""
    if tape.format == "kit":
        for name in ("model", "served_model", "endpoint", "recorded_at"):
            if getattr(tape, name):
                tape.sources[name] = f"meta.{name}"
    for inter in tape.interactions:
        for name, found in inter.found.items():
            if not getattr(tape, name):
                setattr(tape, name, found.value)
                tape.sources[name] = found.where
        if tape.model is None and inter.model:
            tape.model, tape.sources["model"] = inter.model, "request body"
        if tape.served_model is None and inter.served_model:
            tape.served_model, tape.sources["served_model"] = inter.served_model, "response body"
        if tape.endpoint is None and inter.url:
            tape.endpoint = urlsplit(inter.url).hostname
            if tape.endpoint:
                tape.sources["endpoint"] = "request URL"
        if tape.recorded_at is None:
            tape.recorded_at = _http_date(inter.response_headers.get("date"))
            if tape.recorded_at:
                tape.sources["recorded_at"] = "response date header"


def _http_date(values: list[str] | None) -> str | None:
    if not values:
        return None
    try:
        when = email.utils.parsedate_to_datetime(values[0])
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" in RFC 5322 means UTC with unknown origin zone
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _headers(raw: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if isinstance(raw, dict):
        for name, value in raw.items():
            values = value if isinstance(value, list) else [value]
            out.setdefault(str(name).lower(), []).extend(str(v) for v in values)
    elif isinstance(raw, list):  # HAR: [{"name": ..., "value": ...}]
        for item in raw:
            if isinstance(item, dict) and "name" in item:
                out.setdefault(str(item["name"]).lower(), []).append(str(item.get("value", "")))
    return out


def _decode_body(raw: Any, headers: dict[str, list[str]]) -> tuple[Any, str | None]:
    """(parsed JSON body or None, text when not JSON). Inflates gzip/deflate bodies with a size cap."""
    if raw is None or raw == "" or raw == b"":
        return None, None
    if isinstance(raw, (dict, list)):
        return raw, None
    if isinstance(raw, str):
        data: bytes | None = None
        text = raw
    elif isinstance(raw, bytes):
        data = raw
        encoding = ",".join(headers.get("content-encoding", [])).lower()
        if "gzip" in encoding or data[:2] == b"\x1f\x8b":
            data = _inflate(data, zlib.MAX_WBITS | 16)
        elif "deflate" in encoding:
            data = _inflate(data, zlib.MAX_WBITS | 32)  # zlib or gzip header, detected
        if data is None:
            return None, "<undecodable compressed body>"
        text = data.decode("utf-8", "replace")
    else:
        return raw, None
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") and (data is None or _values_bound(text) <= _MAX_VALUES):
        try:
            return json.loads(text), None
        except ValueError:
            pass
    return None, text


def _inflate(data: bytes, wbits: int) -> bytes | None:
    try:
        return zlib.decompressobj(wbits).decompress(data, _MAX_INFLATED_BYTES)
    except zlib.error:
        return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def tapes_of(ctx: Context) -> list[Tape]:
    """The context's tapes, loaded once per context (four checks read them; big YAML is slow to parse).

    Checks run in parallel (``--jobs``): the first caller loads while the others wait for it
    (`Context.memo`), so 10,000 tapes are held in memory once, not once per check that asked at once.
    """
    return ctx.memo("tapes", lambda: load_tapes(ctx.repo, ctx.manifest.cassette_dir))
