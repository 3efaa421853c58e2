"""Recognise a hand-rolled recording, whatever its author named things, and find its metadata anywhere.

Candidates store the same facts under their own names: ``request``/``req``/``req_json``/``request_body``,
``response``/``resp``/``response_json``, a metadata block called ``meta``, ``metadata``, ``provenance`` or
nothing at all (``recorded_on`` beside the request), a served model in the response body or in
``model_served``/``response_model``, an endpoint as ``url``, ``endpoint``, ``host`` or ``request_url``, a
time as ``recorded_at``, ``recorded_utc``, ``captured_at``, ``when`` or only the response's ``date`` header.
This module reads them by meaning: families of names, values of the right shape, and the path where each
was found, so the evidence can say ``recorded_at from provenance.recorded_at``.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Found", "RecordParts", "endpoint_host", "find_metadata", "is_record", "split_record", "timestamp"]

_REQ = re.compile(r"^(request|req|http_request)$", re.IGNORECASE)
_RESP = re.compile(r"^(response|resp|reply|http_response)$", re.IGNORECASE)
_FLAT_REQ_BODY = re.compile(r"^(req|request)[_-]?(body|json|payload|data)$", re.IGNORECASE)
_FLAT_RESP_BODY = re.compile(r"^(resp|response)[_-]?(body|json|payload|data|text)$", re.IGNORECASE)
_BODY = ("body", "json", "payload", "data", "content", "text", "string")
_EVENTS = ("events", "chunks", "stream", "sse")
# Keys that hold a body's own fields: a request part that has these *is* the body.
_REQUEST_BODY_FIELDS = ("messages", "model", "prompt", "input", "contents", "system")
_RESPONSE_BODY_FIELDS = ("choices", "content", "candidates", "output", "stop_reason", "usage")

_SERVED = re.compile(r"(^|_)(served|response|resp)[_-]?model$|^model[_-]?(served|version)$", re.IGNORECASE)
_REQUESTED = re.compile(
    r"^(requested|request|asked|req)[_-]?model$|^model[_-]?(requested|asked)?$", re.IGNORECASE
)
_ENDPOINT = re.compile(
    r"(^|_)(url|uri|endpoint|host|base[_-]?url|api[_-]?base|endpoint[_-]?host)$", re.IGNORECASE
)
_TIME = re.compile(
    r"(^|_)(recorded|captured|timestamp|when|date|time|recorded[_-]?(at|on|utc)|captured[_-]?at|created[_-]?at)$",
    re.IGNORECASE,
)
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")
_HOSTLIKE = re.compile(
    r"^(https?://)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9-]+)*(:\d+)?(/\S*)?$", re.IGNORECASE
)
_MAX_DEPTH = 4


@dataclass(frozen=True)
class Found:
    value: str
    where: str  # dotted path inside the record, e.g. "provenance.recorded_at" or "response.headers.date"


@dataclass
class RecordParts:
    """A record split into what was asked, what came back, and everything else (its metadata)."""

    request: dict[str, Any]
    response: dict[str, Any]
    request_body: Any = None
    response_body: Any = None
    response_events: list[Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    request_key: str = "request"  # the names the record used, for the metadata paths
    response_key: str = "response"


def _named(item: dict[str, Any], pattern: re.Pattern[str]) -> str | None:
    for key, value in item.items():
        if isinstance(key, str) and pattern.match(key) and isinstance(value, dict):
            return key
    return None


def _flat(item: dict[str, Any], pattern: re.Pattern[str]) -> str | None:
    for key in item:
        if isinstance(key, str) and pattern.match(key):
            return key
    return None


def is_record(item: Any) -> bool:
    """A dict holding a request part and a response part, under any of the usual names."""
    return split_record(item) is not None


def split_record(item: Any) -> RecordParts | None:
    """The request, response and metadata of one recorded exchange, or None when ``item`` is not one."""
    if not isinstance(item, dict):
        return None
    req_key, resp_key = _named(item, _REQ), _named(item, _RESP)
    if req_key is not None and resp_key is not None:
        req, resp = item[req_key], item[resp_key]
        parts = RecordParts(request=req, response=resp, request_key=req_key, response_key=resp_key)
        parts.request_body = _body(req, _REQUEST_BODY_FIELDS)
        parts.response_body = _body(resp, _RESPONSE_BODY_FIELDS)
        events = next((resp[k] for k in _EVENTS if isinstance(resp.get(k), list)), None)
        parts.response_events = events
        parts.meta = {k: v for k, v in item.items() if k not in (req_key, resp_key)}
        return parts
    flat_req, flat_resp = _flat(item, _FLAT_REQ_BODY), _flat(item, _FLAT_RESP_BODY)
    if flat_req is None or flat_resp is None:
        return None
    parts = RecordParts(request={}, response={}, request_key=flat_req, response_key=flat_resp)
    parts.request_body = item[flat_req]
    parts.response_body = item[flat_resp]
    parts.meta = {k: v for k, v in item.items() if k not in (flat_req, flat_resp)}
    return parts


def _body(part: dict[str, Any], own_fields: tuple[str, ...]) -> Any:
    for name in _BODY:
        if name in part and part[name] not in (None, ""):
            return part[name]
    if any(name in part for name in own_fields):
        return part  # the part is the body itself (`"request": {"model": ..., "messages": ...}`)
    return None


def find_metadata(parts: RecordParts, outer: dict[str, Any] | None = None) -> dict[str, Found]:
    """``model``, ``served_model``, ``endpoint`` and ``recorded_at``, each with where it was found.

    Looked for in the record's metadata (any block, any reasonable name), then the bodies (request ``model``,
    response ``model``), the request's URL, the response's ``date`` header, and last in ``outer`` (the file's
    own top-level fields when the records sit in a list).
    """
    found: dict[str, Found] = {}
    sources: list[tuple[str, Any]] = [("", parts.meta), (parts.request_key, _without_bodies(parts.request))]
    sources.append((parts.response_key, _without_bodies(parts.response)))
    if outer:
        sources.append(("", outer))
    for prefix, tree in sources:
        for path, key, value in _leaves(tree, prefix):
            _consider(found, path, key, value)
    if "model" not in found and isinstance(parts.request_body, dict):
        model = parts.request_body.get("model")
        if isinstance(model, str) and model:
            found["model"] = Found(model, f"{parts.request_key}.body.model")
    served = _served(parts)
    if "served_model" not in found and served is not None:
        found["served_model"] = served
    return found


def _without_bodies(part: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if k not in _BODY and k not in _EVENTS}


def _leaves(tree: Any, prefix: str, depth: int = 0) -> Iterator[tuple[str, str, Any]]:
    if not isinstance(tree, dict) or depth > _MAX_DEPTH:
        return
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            yield from _leaves(value, path, depth + 1)
        elif isinstance(value, list) and len(value) == 1 and not isinstance(value[0], (dict, list)):
            yield path, str(key), value[0]  # vcrpy-style header lists
        else:
            yield path, str(key), value


def _consider(found: dict[str, Found], path: str, key: str, value: Any) -> None:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return
    text = str(value).strip()
    if not text:
        return
    if "served_model" not in found and _SERVED.search(key) and isinstance(value, str):
        found["served_model"] = Found(text, path)
    elif "model" not in found and _REQUESTED.match(key) and isinstance(value, str):
        found["model"] = Found(text, path)
    elif "endpoint" not in found and _ENDPOINT.search(key) and isinstance(value, str):
        host = endpoint_host(text)
        if host:
            found["endpoint"] = Found(host, path)
    elif "recorded_at" not in found and _TIME.search(key):
        when = timestamp(value)
        if when:
            found["recorded_at"] = Found(when, path)


def _served(parts: RecordParts) -> Found | None:
    body = parts.response_body
    if isinstance(body, dict):
        for name in ("model", "modelVersion"):
            if isinstance(body.get(name), str) and body[name]:
                return Found(body[name], f"{parts.response_key}.body.{name}")
    for index, event in enumerate(parts.response_events or ()):
        data = event.get("data") if isinstance(event, dict) else None
        message = data.get("message") if isinstance(data, dict) else None
        for holder in (message, data):
            if isinstance(holder, dict) and isinstance(holder.get("model"), str) and holder["model"]:
                return Found(holder["model"], f"{parts.response_key}.events[{index}]")
    return None


_METHOD_PREFIX = re.compile(r"^(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS)\s+", re.IGNORECASE)


def endpoint_host(text: str) -> str | None:
    """The host a URL or bare host names (``POST https://api.openai.com/v1`` -> ``api.openai.com``)."""
    text = _METHOD_PREFIX.sub("", text.strip())
    if not _HOSTLIKE.match(text):
        return None
    split = urlsplit(text if "://" in text else f"//{text}")
    host = split.hostname
    return host if host and ("." in host or host == "localhost") else None


def timestamp(value: Any) -> str | None:
    """An ISO 8601 or RFC 2822 time as ``YYYY-MM-DDTHH:MM:SSZ`` (date-only values keep the date)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None  # an epoch number could be anything (a created id, a count): not read as a time
    text = str(value).strip()
    if _ISO.match(text):
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return text[:10]
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
