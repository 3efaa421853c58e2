"""The serve probe's client, beside the run it probes: in the run's network namespace, out of its sight.

Started by grader/sandbox.py (``run(netns_helpers=...)``) as ``python -I _serve_client.py ...`` in the
serve probe's fresh network namespace, after ``lo`` is up and before ``make serve`` starts: the grader's
interpreter, user and filesystem, outside the run's mount and pid namespaces (grader/checks/serve_probe.py
builds the command). Red-team R13: a client inside the run had its requests in a file the server could
read, and a server answered the probe's unseen request honestly and every other one with a made-up 200. It

1. reads the plan (the recorded request) and opens the server's output file and its own result file, all
   in a folder only the grader's user can open, which the run is never shown (the run writes the server's
   output through a descriptor it inherited, never by path);
2. forks: the parent exits 0 (the run may start); the child stays root only to end the run when the
   client is done (it kills the run's process group, which it shares), and forks the client, which gives
   up root (uid 65534) at once;
3. the client waits for the first loopback URL in the server's output, sends the recorded request, then
   the same request with its last message changed (made here, now, from a random order number: no file
   holds it before it is sent), and writes one JSON line: each request's HTTP status and body, -1 when
   no HTTP answer came (refused after the server's start-up, reset, timed out).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

_NOBODY = 65534
LOOPBACK_URL = re.compile(r"http://(127\.0\.0\.1|localhost|\[::1\]):(\d+)")
_BODY_CAP = 2_000_000
_REQUEST_TIMEOUT = 20.0
_STARTUP_TRIES = 40  # connection refused: the URL may be printed before the socket accepts


def unseen(body: dict[str, Any]) -> dict[str, Any]:
    """The same request with its last message changed (or a field added when it has no messages)."""
    # Like a customer's own words (no tape holds a random order number); nothing says "probe".
    probe = f" (order #{100000 + secrets.randbelow(900000)})"
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        last = dict(messages[-1])
        if isinstance(last.get("content"), str):
            last["content"] += probe
            return {**body, "messages": [*messages[:-1], last]}
    return {**body, "note": probe.strip()}


def _late(signum: int, frame: object) -> None:
    raise TimeoutError(f"no whole HTTP answer within {_REQUEST_TIMEOUT:g} s")


def whole_answers_in_time() -> None:
    """Each `_send` gets `_REQUEST_TIMEOUT` for the whole exchange, not per read (red team 5, G7: a server
    that trickled a space every 2 s for two minutes before a made-up answer kept the client reading until
    the run's end, and the probe went unscored). The client's process only: it owns SIGALRM."""
    signal.signal(signal.SIGALRM, _late)


def _send(origin: str, req: dict[str, Any]) -> dict[str, Any]:
    signal.setitimer(signal.ITIMER_REAL, _REQUEST_TIMEOUT)
    try:
        return _exchange(origin, req)
    except TimeoutError as exc:
        return {"status": -1, "body": str(exc)[:300]}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _exchange(origin: str, req: dict[str, Any]) -> dict[str, Any]:
    data = json.dumps(req["body"]).encode("utf-8")
    url = origin + req["path"]  # http://<loopback>:<port>/...: the origin is matched by LOOPBACK_URL
    # As the official SDKs introduce themselves (red team 19, F1: a server that answered SDKs but flooded
    # any other client to death): nothing in the request says it is not one of them.
    anthropic = req["path"].rstrip("/").endswith("/messages")
    sdk = "Anthropic/Python 0.52.0" if anthropic else "OpenAI/Python 1.82.0"
    headers = {"content-type": "application/json", "accept": "application/json", "user-agent": sdk}
    request = urllib.request.Request(url, data=data, method=req["method"], headers=headers)  # noqa: S310
    answer: dict[str, Any] = {"status": -1, "body": ""}
    for _ in range(_STARTUP_TRIES):
        try:
            with urllib.request.urlopen(request, timeout=_REQUEST_TIMEOUT) as resp:  # noqa: S310 - loopback
                return {"status": resp.status, "body": resp.read(_BODY_CAP).decode("utf-8", "replace")}
        except urllib.error.HTTPError as exc:
            return {"status": exc.code, "body": exc.read(_BODY_CAP // 10).decode("utf-8", "replace")}
        except urllib.error.URLError as exc:
            answer = {"status": -1, "body": str(exc.reason)[:300]}
            if not isinstance(exc.reason, ConnectionRefusedError):
                return answer
        except OSError as exc:  # reset, closed without an answer, timed out: no HTTP answer
            return {"status": -1, "body": str(exc)[:300]}
        time.sleep(0.1)
    return answer


def _client(plan: dict[str, Any], server_output: int, url_wait: float) -> dict[str, Any]:
    deadline = time.monotonic() + url_wait
    match = None
    while match is None:
        text = os.pread(server_output, 1_000_000, 0).decode("utf-8", "replace")
        match = LOOPBACK_URL.search(text)
        if match is None:
            if time.monotonic() >= deadline:
                return {"error": "no-url"}
            time.sleep(0.05)
    origin = f"http://{match.group(1)}:{match.group(2)}"
    recorded = plan["recorded"]
    out: dict[str, Any] = {"origin": origin, "recorded": _send(origin, recorded)}
    out["unseen"] = _send(origin, {**recorded, "body": unseen(recorded["body"])})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="_serve_client")
    parser.add_argument("--plan", required=True, help="JSON: the recorded request")
    parser.add_argument("--server-output", required=True, help="the file the server's stdout goes to")
    parser.add_argument("--result", required=True, help="created here (must not exist)")
    parser.add_argument("--url-wait", type=float, default=20.0)
    parser.add_argument("--lifetime", type=float, required=True, help="seconds the client may take")
    args = parser.parse_args(argv)
    os.chdir("/")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from grader._intercept_helper import _detach, _drop

    # What the standard library imports lazily must be loaded before root is given up: the grader's
    # interpreter may live where uid 65534 cannot read (a Python under a 0700 /root).
    "localhost".encode("idna")
    with open(args.plan, encoding="utf-8") as handle:
        plan = json.load(handle)
    server_output = os.open(args.server_output, os.O_RDONLY | os.O_NOFOLLOW)
    result = os.open(args.result, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork():
        return 0  # the run may start
    try:
        _detach(server_output, result)
        client = os.fork()
        if client == 0:
            try:
                _drop(_NOBODY)
                whole_answers_in_time()
                answer = _client(plan, server_output, args.url_wait)
                os.write(result, (json.dumps(answer) + "\n").encode("utf-8"))
            finally:
                os._exit(0)
        os.close(server_output)
        os.close(result)
        deadline = time.monotonic() + args.lifetime
        while time.monotonic() < deadline and os.waitpid(client, os.WNOHANG) == (0, 0):
            time.sleep(0.05)
        # Done (or out of time): end the run, whose process group this process shares. Nothing of the
        # run's is needed any more, and the server must not keep it open until its timeout.
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
