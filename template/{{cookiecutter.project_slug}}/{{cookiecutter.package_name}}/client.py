"""The one place that builds the HTTP client: every model call goes through the cassette transport.

The provider and model come from ``_settings`` (chosen when the repository was baked); the endpoint and
key come from the provider's own environment variables, so the official SDKs and this module agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ._settings import DEFAULT_MODEL, PROVIDER
from .cassette import CassetteTransport

CASSETTE_DIR = Path(__file__).resolve().parent.parent / "cassettes"
ANTHROPIC_VERSION = "2023-06-01"
API_KEY_ENV = "ANTHROPIC_API_KEY" if PROVIDER == "anthropic" else "OPENAI_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL" if PROVIDER == "anthropic" else "OPENAI_BASE_URL"
_DEFAULT_BASE_URL = "https://api.anthropic.com" if PROVIDER == "anthropic" else "https://api.openai.com/v1"
# Always the same types in the request (an int 0 and a float 0.0 hash differently).
TEMPERATURE = 0
MAX_TOKENS = 200


class ModelError(RuntimeError):
    """The endpoint could not be reached, or answered without a usable completion. The message always
    names the method and URL, so a wrong base URL shows at once."""


class ReplayMiss(ModelError):
    """The endpoint is a replay server (`make serve`) with no tape for this request: a cassette miss, told
    in full (its key, the nearest recorded request and how it differs)."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    headers: dict[str, str]


def endpoint() -> Endpoint:
    """Where requests go and with which headers. Without a key (replay) no credential header is sent."""
    base = (os.environ.get(BASE_URL_ENV) or _DEFAULT_BASE_URL).rstrip("/")
    key = os.environ.get(API_KEY_ENV, "")
    if PROVIDER == "anthropic":
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if key:
            headers["x-api-key"] = key
        return Endpoint(f"{base}/v1/messages", headers)
    return Endpoint(f"{base}/chat/completions", {"authorization": f"Bearer {key}"} if key else {})


def build_client(
    *, mode: str | None = None, cassette_dir: Path | None = None, timeout: float = 60.0
) -> httpx.Client:
    """An ``httpx.Client`` whose only transport is the cassette (``CASSETTE_MODE``, default replay)."""
    transport = CassetteTransport(cassette_dir or CASSETTE_DIR, mode=mode)
    # Under CASSETTE_REPLAY_UNTIL the first N calls come from tape: a missing key matters only if a call
    # goes live, and the endpoint then says so (the error names the request).
    recording = transport.cassette.mode != "replay" and transport.cassette.replay_until is None
    if recording and not os.environ.get(API_KEY_ENV):
        raise ModelError(f"set {API_KEY_ENV} (and {BASE_URL_ENV} for another endpoint) to record")
    return httpx.Client(transport=transport, timeout=timeout)


def request_body(system: str, user: str, *, model: str | None = None) -> dict[str, Any]:
    """The JSON body for one system + user exchange, in the provider's wire format."""
    model = model or DEFAULT_MODEL
    if PROVIDER == "anthropic":
        return {
            "model": model,
            "system": system,
            "messages": [{"role": "user", "content": user}],
            "max_tokens": MAX_TOKENS,
            "temperature": TEMPERATURE,
        }
    return {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": MAX_TOKENS,
        "temperature": TEMPERATURE,
    }


def _answer_text(data: Any, where: str) -> str:
    """The completion's text. A reply that holds no usable answer is a ModelError naming what came back
    (a refusal, a tool call, an answer cut at the token limit, no text): never a guess, never a TypeError."""
    try:
        if PROVIDER == "anthropic":
            stop = data.get("stop_reason")
            blocks = data["content"]
            text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
            tools = [b.get("name") for b in blocks if b.get("type") == "tool_use"]
            refusal = text if stop == "refusal" else None
        else:
            choice = data["choices"][0]
            message = choice["message"]
            stop, text, refusal = choice.get("finish_reason"), message.get("content"), message.get("refusal")
            tools = [(c.get("function") or {}).get("name") for c in message.get("tool_calls") or []]
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelError(f"unexpected response shape from {where}: missing {exc}") from None
    if refusal:
        raise ModelError(f"the model refused to answer ({where}): {refusal[:200]!r}")
    if tools:
        names = ", ".join(map(str, tools))
        raise ModelError(f"the model called a tool ({names}) instead of answering in text ({where})")
    if stop in ("length", "max_tokens"):
        raise ModelError(f"the answer was cut at the token limit ({stop}, {where}): {str(text)[:200]!r}")
    if not isinstance(text, str) or not text.strip():
        raise ModelError(f"the model sent no answer text ({where})")
    return text


def _replay_miss(response: httpx.Response) -> str:
    """The message of a replay server's cassette-miss answer (`make serve`'s 422), "" for anything else."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return ""
    if isinstance(error, dict) and error.get("type") == "cassette_miss":
        return str(error.get("message", ""))
    return ""


def _hint(url: str, status: int) -> str:
    if status == 404 and "/v1/v1/" in url:
        # The base URL already ended in /v1 and the path added another: Anthropic's base URL has no /v1.
        return f" (the path has /v1 twice: set {BASE_URL_ENV} without the trailing /v1)"
    return ""


def complete(system: str, user: str, *, client: httpx.Client | None = None, model: str | None = None) -> str:
    """Send one exchange and return the model's text answer."""
    own = client is None
    client = client or build_client()
    target = endpoint()
    where = f"POST {target.url}"
    try:
        response = client.post(
            target.url, json=request_body(system, user, model=model), headers=target.headers
        )
    except httpx.TransportError as exc:
        raise ModelError(f"cannot reach the model endpoint: {where}: {type(exc).__name__}: {exc}") from exc
    finally:
        if own:
            client.close()
    if response.status_code == 422:
        miss = _replay_miss(response)
        if miss:
            raise ReplayMiss(f"{where}: {miss}")
    if response.status_code != 200:
        hint = _hint(target.url, response.status_code)
        raise ModelError(
            f"model endpoint answered HTTP {response.status_code} to {where}{hint}: {response.text[:200]}"
        )
    try:
        data = response.json()
    except ValueError:
        raise ModelError(f"{where} answered with a body that is not JSON: {response.text[:200]!r}") from None
    return _answer_text(data, where)
