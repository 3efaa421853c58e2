"""The replay-server probe: when the Makefile has a ``serve`` target, does it replay and refuse loudly?

Not a check of its own: the `loud-miss` check calls `probe_serve` and reports its facts (``serve_*``); a
server that answers an unseen request with 200 counts as one more silent fallback. No rubric row needs a
server for full marks.

In a scratch copy of the checkout, ``make serve`` starts in the sandbox with loopback only (a fresh network
namespace with ``lo`` up, nothing else reachable). A grader-owned client (standard library only, started
with ``python -E -s`` from a read-only folder beside the checkout) reads the first loopback URL the server
prints, then sends two requests to its origin: a recorded one (the first tape's stored request, to its stored
path) and the same request with its last message changed, which no tape holds. The first must answer 200
with the recorded body (or stream); the second 422 with a JSON error naming a key (16+ hex characters).
The client's verdict is what the grader's own script measured; nothing the server prints is scored.
"""

from __future__ import annotations

import json
import re
import secrets as _random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grader._json import marked_answer
from grader.checks import Finding
from grader.context import makefile_targets
from grader.loopback import is_loopback
from grader.tapes import Interaction, tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["ServeProbe", "probe_serve"]

_LABEL = "serve probe"
# Random per grade, and no names: the run sees this script (docs/security.md, what a run can see).
_MARKER = f"@@{_random.token_hex(6)}@@"
_NO_SERVER = 97

# The server runs in the wrapper's own process group (the sandbox starts each command in a new session):
# `kill 0` stops make and the server it started, and the trap keeps the wrapper's exit status.
_WRAPPER = """\
out="$HOME/.serve-out"
: >"$out"
make serve >"$out" 2>"$HOME/.serve-err" </dev/null &
i=0
while ! grep -q "http://" "$out" && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
if grep -q "http://" "$out"; then
  python -E -s "$SERVE_TOOLS/client.py" "$out" "$SERVE_TOOLS/requests.json"
  status=$?
else
  echo "make serve printed no URL" >&2
  status={code}
fi
trap 'exit "$status"' TERM
kill -TERM 0
wait
exit "$status"
"""

# Runs in the sandbox under the submission's interpreter, standard library only. Prints one marked line.
_CLIENT = r"""
import json, re, sys, time, urllib.error, urllib.request
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
match = re.search(r"http://(127\.0\.0\.1|localhost|\[::1\]):(\d+)", text)
if not match:
    print(MARKER + json.dumps({"error": "the server printed no loopback URL"}))
    sys.exit(0)
origin = "http://%s:%s" % (match.group(1), match.group(2))
plan = json.load(open(sys.argv[2], encoding="utf-8"))
out = {"origin": origin}
for name in ("recorded", "unseen"):
    req = plan[name]
    data = json.dumps(req["body"]).encode("utf-8")
    request = urllib.request.Request(origin + req["path"], data=data, method=req["method"],
                                     headers={"content-type": "application/json"})
    for attempt in range(40):
        try:
            with urllib.request.urlopen(request, timeout=20) as resp:
                out[name] = {"status": resp.status, "body": resp.read(2000000).decode("utf-8", "replace")}
            break
        except urllib.error.HTTPError as exc:
            out[name] = {"status": exc.code, "body": exc.read(200000).decode("utf-8", "replace")}
            break
        except OSError as exc:  # not listening yet: the URL may be printed before the socket accepts
            out[name] = {"status": -1, "body": str(exc)[:300]}
            time.sleep(0.1)
print(MARKER + json.dumps(out))
""".replace("MARKER", repr(_MARKER))

_KEY = re.compile(r"\b[0-9a-f]{16,64}\b")


@dataclass
class ServeProbe:
    """What the probe found: ``status`` is "ran" or "not available: <why>"."""

    status: str
    replayed: bool = False
    unseen_status: int = -1
    names_key: bool = False
    fallback: Finding | None = None
    outbound: list[str] = field(default_factory=list)  # non-loopback connection attempts, "where target"
    details: list[str] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return self.status == "ran"


def _recorded(ctx: Context) -> tuple[Interaction, str] | None:
    """The first tape interaction a server could replay: a JSON request body and a 2xx reply."""
    for tape in tapes_of(ctx):
        for inter in tape.interactions:
            ok = inter.status is None or 200 <= inter.status < 300
            if isinstance(inter.request_body, dict) and inter.path and ok:
                if inter.response_body is not None or inter.response_text:
                    return inter, f"{tape.path}:{inter.line or 1}"
    return None


def _unseen(body: dict[str, Any]) -> dict[str, Any]:
    """The same request with its last message changed (or a field added when it has no messages)."""
    # Like a customer's own words (no tape holds a random order number); nothing says "probe".
    probe = f" (order #{100000 + _random.randbelow(900000)})"
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        last = dict(messages[-1])
        if isinstance(last.get("content"), str):
            last["content"] += probe
            return {**body, "messages": [*messages[:-1], last]}
    return {**body, "note": probe.strip()}


def _stage(dest: Any, plan: dict[str, Any]) -> Any:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "client.py").write_text(_CLIENT, encoding="utf-8")
    (dest / "requests.json").write_text(json.dumps(plan, ensure_ascii=False), encoding="utf-8")
    dest.chmod(0o755)
    for item in dest.iterdir():
        item.chmod(0o644)
    return dest


def _same_answer(inter: Interaction, body: str) -> bool:
    if inter.response_body is not None:
        try:
            return bool(json.loads(body) == inter.response_body)
        except ValueError:
            return False
    return body.replace("\r\n", "\n").strip() == (inter.response_text or "").replace("\r\n", "\n").strip()


def probe_serve(ctx: Context) -> ServeProbe:
    """Start ``make serve`` in the sandbox (loopback only) and replay a recorded and an unseen request."""
    if "serve" not in makefile_targets(ctx.repo):
        return ServeProbe("not available: no serve target in the Makefile")
    if ctx.env is None:
        return ServeProbe("not available: the submission's environment was not installed")
    found = _recorded(ctx)
    if found is None:
        return ServeProbe("not available: no tape holds a JSON request to replay")
    inter, where = found
    body = inter.request_body
    plan = {
        "recorded": {"method": (inter.method or "POST").upper(), "path": inter.path, "body": body},
        "unseen": {"method": (inter.method or "POST").upper(), "path": inter.path, "body": _unseen(body)},
    }
    tools = _stage(ctx.workspace.root / "serve-tools", plan)
    scratch = ctx.scratch_copy("serve-probe")
    argv = ["/bin/sh", "-c", _WRAPPER.format(code=_NO_SERVER)]
    run, audit = ctx.run(argv, cwd=scratch, env={"SERVE_TOOLS": str(tools)}, loopback=True, label=_LABEL)
    probe = ServeProbe("ran")
    probe.outbound = [
        f"{e.where} {e.target}"
        for e in audit.network_attempts
        if e.host is not None and not is_loopback(str(e.host))
    ]
    if run.returncode == _NO_SERVER:
        return ServeProbe("not available: `make serve` printed no URL in time", outbound=probe.outbound)
    answer = marked_answer(run.stdout, _MARKER)
    if answer is None or "error" in answer:
        why = answer.get("error") if answer else f"the probe printed no answer (exit {run.returncode})"
        return ServeProbe(f"not available: {why}", outbound=probe.outbound)
    recorded, unseen = answer.get("recorded") or {}, answer.get("unseen") or {}
    probe.replayed = recorded.get("status") == 200 and _same_answer(inter, str(recorded.get("body", "")))
    probe.unseen_status = int(unseen.get("status", -1))
    probe.names_key = probe.unseen_status == 422 and bool(_KEY.search(str(unseen.get("body", ""))))
    probe.details.append(
        f"serve probe: `make serve` replayed the request of {where}: HTTP {recorded.get('status')}"
        f"{' with the recorded answer' if probe.replayed else ', not the recorded answer'}; the same request "
        f"with another message: HTTP {probe.unseen_status}"
        f"{' naming its key' if probe.names_key else ''}"
    )
    if 200 <= probe.unseen_status < 300:
        probe.fallback = Finding(
            "silent-fallback",
            f"`make serve` answered a request no tape holds with HTTP {probe.unseen_status} instead of 422",
            f"{_makefile_line(ctx)}",
        )
    return probe


def _makefile_line(ctx: Context) -> str:
    for name in ("GNUmakefile", "makefile", "Makefile"):
        path = ctx.repo / name
        if path.is_file() and not path.is_symlink():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            number = next((n for n, line in enumerate(lines, 1) if line.startswith("serve:")), 1)
            return f"{name}:{number}"
    return "Makefile:1"
