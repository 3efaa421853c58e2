"""The replay-server probe: when the Makefile has a ``serve`` target, does it replay and refuse loudly?

Not a check of its own: the `loud-miss` check calls `probe_serve` and reports its facts (``serve_*``); a
server that answers an unseen request with 200 counts as one more silent fallback, and one that gives it
no HTTP answer at all (it crashed, reset or hung) keeps `loud` false. No rubric row needs a server for full
marks.

In a scratch copy of the checkout, ``make serve`` starts in the sandbox with loopback only (a fresh network
namespace with ``lo`` up, nothing else reachable); its stdout goes to a descriptor the run inherits, on a
file in a folder only the grader's user can open. The grader's client (grader/_serve_client.py) runs
beside the run, not in it (red-team R13): in the same network namespace, outside its mount and pid
namespaces, as uid 65534. It reads the first loopback URL the server prints, then sends two requests to its
origin: a recorded one (the first tape's stored request, to its stored path) and the same request with its
last message changed, made by the client when it sends it, which no tape and no file holds. The first must
answer 200 with the recorded body (or stream); the second 422 with a JSON error naming a key (16+ hex
characters). The client's result file is what the grader reads; nothing the server prints is scored, and
nothing in the run's environment or filesystem names the probe's inputs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader._serve_client import LOOPBACK_URL
from grader.checks import Finding
from grader.context import makefile_targets
from grader.loopback import is_loopback
from grader.safeio import read_bytes
from grader.tapes import Interaction, tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["ServeProbe", "probe_serve"]

_LABEL = "serve probe"
_CLIENT = Path(__file__).resolve().parents[1] / "_serve_client.py"
_URL_WAIT = 20.0
# Two requests of at most 20 s each after the URL, and start-up retries: the client's time at most.
_CLIENT_TIME = _URL_WAIT + 2 * 25.0
_RESULT_CAP = 4_000_000

# The server runs in the wrapper's process group; the run lasts until the grader's client, beside it, has
# its answers and ends the run (or, where helpers share the host's network, until this bound). The server's
# stdout is the descriptor the grader passed (dash takes one-digit descriptors only: Python dups it).
_WRAPPER = """\
python -E -s -c "import os, sys; fd = int(sys.argv[1]); os.dup2(fd, 1); os.close(fd); \
os.execvp(sys.argv[2], sys.argv[2:])" {fd} make serve 2>"$HOME/.serve-err" </dev/null &
sleep {bound}
"""

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
    recorded = {"method": (inter.method or "POST").upper(), "path": inter.path, "body": inter.request_body}
    # Only the grader's user can open this folder, and the run is never shown it.
    private = Path(tempfile.mkdtemp(prefix="k-", dir=ctx.workspace.root))
    try:
        return _probe(ctx, inter, where, recorded, private)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _probe(
    ctx: Context, inter: Interaction, where: str, recorded: dict[str, Any], private: Path
) -> ServeProbe:
    private.chmod(0o700)
    (private / "plan.json").write_text(json.dumps({"recorded": recorded}, ensure_ascii=False), "utf-8")
    server_output, result = private / "server-output", private / "result.json"
    fd = os.open(server_output, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
    client = [sys.executable, "-I", str(_CLIENT), "--plan", str(private / "plan.json")]
    client += ["--server-output", str(server_output), "--result", str(result)]
    client += ["--url-wait", f"{_URL_WAIT:g}", "--lifetime", f"{_CLIENT_TIME:g}"]
    # The client ends the run when it is done; the bound matters only where helpers share the host's network
    # (then the run lasts it), and stays under the run's timeout so that an honest server is not a timeout.
    bound = max(1, min(int(_CLIENT_TIME) + 5, int(ctx.timeout) - 2))
    argv = ["/bin/sh", "-c", _WRAPPER.format(fd=fd, bound=bound)]
    scratch = ctx.scratch_copy("serve-probe")
    try:
        run, audit = ctx.run(
            argv, cwd=scratch, loopback=True, label=_LABEL, pass_fds=(fd,), netns_helpers=[client]
        )
    finally:
        os.close(fd)
    outbound = [
        f"{e.where} {e.target}"
        for e in audit.network_attempts
        if e.host is not None and not is_loopback(str(e.host))
    ]
    answer = _client_answer(result)
    if answer is None:
        said = _last_line(run.stderr)
        why = f"the probe's client gave no answer (exit {run.returncode}{': ' + said if said else ''})"
        if not _printed_url(server_output):
            return ServeProbe(f"not available: {why}", outbound=outbound)
        # The server was up and the client died while talking to it (red team 19, F1: a server that floods
        # any client not calling itself an SDK with a 40 GB body): no whole answer to the unseen request,
        # which fails the probe as a reset or a hang does; never "not available".
        probe = ServeProbe("ran", outbound=outbound)
        probe.details.append(f"serve probe: `make serve` gave no whole HTTP answer: {why}")
        return probe
    if answer.get("error") == "no-url":
        return ServeProbe("not available: `make serve` printed no loopback URL in time", outbound=outbound)
    probe = ServeProbe("ran", outbound=outbound)
    recorded_answer, unseen = answer.get("recorded") or {}, answer.get("unseen") or {}
    probe.replayed = recorded_answer.get("status") == 200 and _same_answer(
        inter, str(recorded_answer.get("body", ""))
    )
    probe.unseen_status = _status(unseen)
    probe.names_key = probe.unseen_status == 422 and bool(_KEY.search(str(unseen.get("body", ""))))
    unseen_said = (
        f"HTTP {probe.unseen_status}{' naming its key' if probe.names_key else ''}"
        if probe.unseen_status > 0
        else f"no HTTP answer ({_one_line(unseen.get('body'))})"
    )
    probe.details.append(
        f"serve probe: `make serve` replayed the request of {where}: HTTP {recorded_answer.get('status')}"
        f"{' with the recorded answer' if probe.replayed else ', not the recorded answer'}; the same request "
        f"with another message: {unseen_said}"
    )
    if 200 <= probe.unseen_status < 300:
        probe.fallback = Finding(
            "silent-fallback",
            f"`make serve` answered a request no tape holds with HTTP {probe.unseen_status} instead of 422",
            f"{_makefile_line(ctx)}",
        )
    return probe


def _printed_url(server_output: Path) -> bool:
    """The server's stdout (the grader's file) names a loopback URL, as the client looks for one."""
    try:
        text = read_bytes(server_output, cap=1_000_000, truncate=True).decode("utf-8", "replace")
    except OSError:
        return False
    return LOOPBACK_URL.search(text) is not None


def _client_answer(path: Path) -> dict[str, Any] | None:
    try:
        raw = read_bytes(path, cap=_RESULT_CAP, truncate=True)
    except OSError:
        return None
    try:
        value = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _status(answer: dict[str, Any]) -> int:
    status = answer.get("status")
    return status if isinstance(status, int) else -1


def _one_line(text: object) -> str:
    words = " ".join(str(text or "").split())
    return (words[:117] + "...") if len(words) > 120 else (words or "the connection ended")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _makefile_line(ctx: Context) -> str:
    for name in ("GNUmakefile", "makefile", "Makefile"):
        path = ctx.repo / name
        if path.is_file() and not path.is_symlink():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            number = next((n for n, line in enumerate(lines, 1) if line.startswith("serve:")), 1)
            return f"{name}:{number}"
    return "Makefile:1"
