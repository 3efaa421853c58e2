"""``python -m <package>.serve``: the tapes as a replay-only model endpoint, and a page to browse them.

A loopback HTTP server that speaks this project's wire format (OpenAI chat completions or Anthropic
messages, streamed or not). A request whose cassette key has a tape gets the recorded answer; anything else
gets HTTP 422 with a JSON error naming the key and the nearest recorded request. It reads tapes only: it
never forwards a request, opens no outbound connection and needs no key. Point any SDK at it::

    OPENAI_BASE_URL=http://127.0.0.1:8787/v1      (openai-compatible)
    ANTHROPIC_BASE_URL=http://127.0.0.1:8787      (anthropic)

``GET /`` is one self-contained page (no external assets, no script): every recorded ticket with its
replayed triage, and a box to triage a message (``GET /?message=...``): a recorded one shows the answer,
anything else shows the 422 and its key. The first line printed is the base URL.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from ._settings import PROVIDER
from .agent import TriageError, triage
from .cassette import Cassette, CassetteMiss, Reply, nearest_tape
from .client import API_KEY_ENV, BASE_URL_ENV, CASSETTE_DIR, ModelError, build_client

__all__ = ["Replayer", "main"]

HOST = "127.0.0.1"
DEFAULT_PORT = 8787
_MAX_BODY = 8 * 1024 * 1024
# The page loads nothing from anywhere: no script, no remote style or image, forms post back here only.
_PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'"


class Replayer:
    """Answers from the tapes in ``cassette_dir``: the recorded reply, or a 422 naming the key."""

    def __init__(self, cassette_dir: Path) -> None:
        self.cassette = Cassette(cassette_dir, mode="replay")

    def answer(self, method: str, path: str, body: bytes) -> tuple[Reply, str]:
        """``(reply, key)`` for one request: the tape's reply, or a 422 whose JSON error names the key."""
        exchange = self.cassette.exchange(method, path, HOST, body, {})
        if self.cassette.tape_path(exchange.key).is_file():
            return self.cassette.replay(exchange), exchange.key
        return self.miss(exchange.key, exchange.stored_request), exchange.key

    def miss(self, key: str, request: dict[str, Any]) -> Reply:
        nearest = nearest_tape(self.cassette.dir, request)
        message = f"cassette miss: no tape {key} for {request['method']} {request['path']}"
        if nearest is not None:
            message += (
                f"; nearest recorded request: {nearest.key} (differs in {_listed(nearest.differences)})"
            )
        error = {
            "type": "cassette_miss",
            "message": message + "; this server only replays recorded requests",
            "key": key,
            "nearest": {"key": nearest.key, "differences": list(nearest.differences)} if nearest else None,
        }
        # What both SDKs read: OpenAI's {"error": ...} and Anthropic's {"type": "error", "error": ...}.
        content = json.dumps({"type": "error", "error": error}, ensure_ascii=False).encode("utf-8")
        return Reply(422, {"content-type": "application/json"}, content=content)

    def triage(self, message: str) -> dict[str, Any]:
        """The agent's own triage of ``message``, replayed from the tapes: ``{"status": 200, ...}`` or 422."""
        sent: list[Any] = []
        client = build_client(mode="replay", cassette_dir=self.cassette.dir)
        client.event_hooks["request"].append(sent.append)  # the exact request, to find its nearest tape
        try:
            with client:
                result = triage(message, client=client)
        except (TriageError, ModelError) as exc:  # a recorded answer the agent rejects: shown as such
            return {"status": 200, "error": f"{type(exc).__name__}: {exc}"}
        except Exception as exc:
            miss = _miss_in_chain(exc)
            if miss is None:
                raise
            return self._missed(miss, sent)
        keys = [self._key(r) for r in sent]
        return {"status": 200, "result": result, "keys": keys}

    def _missed(self, miss: CassetteMiss, sent: list[Any]) -> dict[str, Any]:
        """The 422 outcome of a miss: its key and the recorded request nearest to what was sent."""
        request = {"method": miss.method, "path": miss.path, "body": None}
        if sent:
            request = self.cassette.exchange(
                sent[-1].method, miss.path, HOST, sent[-1].content, {}
            ).stored_request
        return {"status": 422, "key": miss.key, "nearest": nearest_tape(self.cassette.dir, request)}

    def _key(self, request: Any) -> str:
        path = request.url.raw_path.decode("ascii")
        return self.cassette.exchange(request.method, path, HOST, request.content, {}).key

    def tickets(self) -> list[tuple[str, dict[str, Any]]]:
        """Every ticket with a tape the agent replays, as ``(message, triage)``, in tape order."""
        seen, out = set(), []
        for path in sorted(self.cassette.dir.glob("*.json")):
            message = _user_text(path)
            if message is None or message in seen:
                continue
            seen.add(message)
            outcome = self.triage(message)
            if outcome["status"] == 200 and "result" in outcome:
                out.append((message, outcome))
        return out


def _listed(differences: tuple[str, ...], shown: int = 3) -> str:
    more = len(differences) - shown
    return "; ".join(differences[:shown]) + (f" (and {more} more)" if more > 0 else "")


def _miss_in_chain(exc: BaseException | None) -> CassetteMiss | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, CassetteMiss):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _user_text(tape: Path) -> str | None:
    """The last user message of a tape's request, when it is plain text."""
    try:
        messages = json.loads(tape.read_text(encoding="utf-8"))["request"]["body"]["messages"]
        content = [m for m in messages if m.get("role") == "user"][-1]["content"]
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    return content if isinstance(content, str) else None


# ------------------------------------------------------------------------------------------------ page

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:62rem;padding:0 1rem;color:#1b1b1b}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.35rem;text-align:left}
code{font-size:.85em}textarea{width:100%;min-height:4rem;font:inherit}
#result{border:2px solid #888;padding:.6rem 1rem;margin:1rem 0}
#result[data-status="200"]{border-color:#2a7}#result[data-status="422"]{border-color:#c33}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _result_section(message: str, outcome: dict[str, Any]) -> str:
    status = outcome["status"]
    head = f'<section id="result" data-status="{status}"><h2>{status}: '
    asked = f"<p>message: <q>{_esc(message)}</q></p>"
    if status == 422:
        nearest = outcome.get("nearest")
        near = (
            f"<p>nearest recorded request: <code>{_esc(nearest.key)}</code> "
            f"(differs in {_esc(_listed(nearest.differences))})</p>"
            if nearest
            else "<p>no tape recorded yet</p>"
        )
        return (
            f"{head}no tape for this message</h2>{asked}"
            f'<p>HTTP 422, cassette miss: key <code class="key">{_esc(outcome["key"])}</code></p>'
            f"{near}<p>Replay only: an unseen message is never sent to a model.</p></section>"
        )
    if "error" in outcome:
        return f"{head}recorded answer not usable</h2>{asked}<p>{_esc(outcome['error'])}</p></section>"
    result = outcome["result"]
    keys = ", ".join(f"<code>{_esc(k)}</code>" for k in outcome["keys"])
    return (
        f"{head}replayed</h2>{asked}"
        f'<p>intent <b class="intent">{_esc(result.get("intent"))}</b>, needs_human '
        f'<b class="needs-human">{_esc(json.dumps(result.get("needs_human")))}</b></p>'
        f"<p>tape {keys}</p><pre>{_esc(json.dumps(result, ensure_ascii=False))}</pre></section>"
    )


def page(replayer: Replayer, base_url: str, message: str | None) -> tuple[int, str]:
    """``(status, html)`` of the page; with ``message``, its triage on top (status 422 on a miss)."""
    status, result = 200, ""
    if message is not None:
        outcome = replayer.triage(message)
        status, result = outcome["status"], _result_section(message, outcome)
    rows = "".join(
        f'<tr><td><a href="/?message={quote(text)}">{_esc(text)}</a></td>'
        f'<td class="intent">{_esc(o["result"].get("intent"))}</td>'
        f"<td>{_esc(json.dumps(o['result'].get('needs_human')))}</td>"
        f"<td><code>{_esc(', '.join(o['keys']))}</code></td></tr>"
        for text, o in replayer.tickets()
    )
    table = (
        '<table id="tickets"><tr><th>ticket</th><th>intent</th><th>needs_human</th><th>tape</th></tr>'
        f"{rows}</table>"
        if rows
        else '<p id="tickets">No recorded ticket yet: run <code>make record</code>.</p>'
    )
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Replay: recorded triage</title>
<style>{_STYLE}</style></head><body>
<h1>Recorded triage, replayed</h1>
<p>Replay only: every answer below comes from a tape in <code>{_esc(replayer.cassette.dir.name)}/</code>.
Nothing is sent to a model. Endpoint for SDKs: <code>{_esc(base_url)}</code> ({_esc(BASE_URL_ENV)}).</p>
<form method="get" action="/"><label for="message">Triage a message</label>
<textarea id="message" name="message">{_esc(message or "")}</textarea>
<button type="submit">Triage</button></form>
{result}
<h2>Recorded tickets</h2>
{table}
</body></html>
"""
    return status, body


# ---------------------------------------------------------------------------------------------- server


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "replay-only"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        sys.stderr.write(f"serve: {self.command} {self.path} -> {args[1] if len(args) > 1 else ''}\n")

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        if url.path == "/":
            values = parse_qs(url.query).get("message")
            status, text = page(self.server.replayer, self.server.base_url, values[0] if values else None)
            headers = {"content-type": "text/html; charset=utf-8"}
            self._send(status, headers, text.encode("utf-8"), is_page=True)
            return
        self._replay(b"")

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        if length > _MAX_BODY:
            self._send(413, {"content-type": "application/json"}, b'{"error": {"message": "body too large"}}')
            return
        self._replay(self.rfile.read(length))

    def _replay(self, body: bytes) -> None:
        reply, _key = self.server.replayer.answer(self.command, self.path, body)
        if reply.events is None:
            self._send(reply.status, reply.headers, reply.content)
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("connection", "close")
        self.end_headers()
        for event in reply.events:
            self.wfile.write(event)
            self.wfile.flush()

    def _send(self, status: int, headers: dict[str, str], content: bytes, *, is_page: bool = False) -> None:
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        if is_page:
            self.send_header("content-security-policy", _PAGE_POLICY)
        self.send_header("content-length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, replayer: Replayer) -> None:
        super().__init__((HOST, port), _Handler)
        self.replayer = replayer
        root = f"http://{HOST}:{self.server_address[1]}"
        # OpenAI's SDKs expect the base URL to end in /v1; Anthropic's append /v1/messages themselves.
        self.base_url = root if PROVIDER == "anthropic" else root + "/v1"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.serve", description="Serve the tapes, replay only."
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on {HOST} (0: any free port)")
    parser.add_argument("--dir", type=Path, default=CASSETTE_DIR, help="the cassette directory")
    args = parser.parse_args(argv)
    try:
        server = _Server(args.port, Replayer(args.dir))
    except OSError as exc:
        reason = exc.strerror or exc
        print(f"serve: error: cannot listen on {HOST}:{args.port}: {reason}; try --port 0", file=sys.stderr)
        return 2
    tapes = len(list(args.dir.glob("*.json")))
    root = server.base_url.removesuffix("/v1")
    print(server.base_url, flush=True)
    print(
        f"replay only, {tapes} tapes in {args.dir}: a recorded request gets its recorded answer, anything "
        "else HTTP 422 naming its key; no key needed, nothing leaves this machine\n"
        f"page: {root}/\n"
        f"try:  CASSETTE_MODE=passthrough {BASE_URL_ENV}={server.base_url} "
        f'{API_KEY_ENV}=unused python -m {__package__} "<message>"',
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
