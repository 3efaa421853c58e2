"""Run a submission's inputs against a stand-in profile in the sandbox; per-ticket outcomes with the truth.

The one machine behind the `model-drift` row (grader/checks/drift.py) and `grade drift`:

- ``find_tickets(ctx)``: the inputs to re-run, the last user message of each recorded request in the
  submission's tapes (what the candidate actually sent the model), distinct, in tape order.
- ``run_tickets(ctx, tickets, profile=...)``: in a throwaway copy of the pristine checkout, the submission's
  triage command (``[tool.takehome] triage_command``, or the discovered ``python -m <pkg>``) runs once per
  ticket, the ticket appended as its last argument, in the sandbox with loopback only, against the kit's
  stand-in playing the given profile. Each ticket's outcome holds the answers the stand-in sent while it ran
  (their ground truth: intended label, drift applied, status) and a verdict: ``correct``, ``loud``
  (non-zero exit), ``violation`` (a wrong label, a made-up answer, or output that is not the agent's own
  ``{"intent", "needs_human"}``), or ``unreached`` (no model call).

The command gets the usual variables: a canary key in ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY`` and the
manifest's ``api_key_env``; the stand-in's URL in ``OPENAI_BASE_URL`` (ending in ``/v1``),
``ANTHROPIC_BASE_URL`` (without it) and the manifest's ``base_url_env``; ``CASSETTE_MODE=record`` (the
kit's documented way to reach the endpoint) and ``CASSETTE_DIR`` pointing at a fresh tape folder, so a
template-built agent records into scratch, never over its committed tapes. An agent that ignores the base
URLs reaches the same stand-in if it calls a host of ``grader/rules/intercept.toml``: each lane is a run of
its own (its own network namespace and stand-in), in which those hosts' HTTPS is answered by a grader-owned
TLS end with a CA made for that run (grader/intercept.py; docs/security.md, guarantee 12).

The stand-in runs beside the run, not in it (red-team R9: a command that read the truth log in its own
HOME answered every drifted ticket with the label the model meant): grader/_standin_helper.py, started by
the sandbox in the lane's network namespace but outside its mount and pid namespaces, as uid 65534, with
its truth log and error log in a folder only the grader's user can open and the run is never shown; its
answers carry no truth header. The grader reads that log after the lane and gives each answer to the
ticket that was running when it was sent (the driver's ``time.monotonic()`` stamps; the driver is
non-dumpable, so the command, the same user, cannot ptrace it or write its memory to forge them).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from grader._json import marked_answer
from grader.errors import NotAssessable
from grader.intercept import InterceptRulesError, load_hosts, prepare
from grader.safeio import read_bytes
from grader.sandbox import can_intercept, helpers_share_host_network
from grader.tapes import is_tape_file, tapes_of

if TYPE_CHECKING:
    from grader.context import Context

__all__ = [
    "ANSWER_KEYS",
    "Call",
    "DriftRun",
    "Ticket",
    "TicketOutcome",
    "Verdict",
    "find_tickets",
    "last_user_message",
    "printed_objects",
    "record_env",
    "run_tickets",
    "stage_profile",
    "triage_command",
]

Verdict = Literal["correct", "loud", "violation", "unreached"]
ANSWER_KEYS = frozenset({"intent", "needs_human"})
# The answer the model sent holds no label to act on: any answer printed after it was made up.
_NO_ANSWER_DRIFTS = frozenset({"refusal", "empty", "truncated", "http_429", "http_500"})
_MARKER = "@@GRADER-DRIFT-RUN@@"
_GRADER = Path(__file__).resolve().parent
_TICKET_TIMEOUT = 30.0
_BASE_ENVS = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
_MAX_TICKET_CHARS = 8000
# Where the stand-in listens in its lane's own network namespace (the interception forwards there); any port
# would do, nothing else listens in that namespace.
_STANDIN_PORT = 8000
_TRUTH_CAP = 4_000_000


@dataclass(frozen=True)
class Ticket:
    """One input: ``id`` (``T01``...), the message, and where it was recorded (``file:line``)."""

    id: str
    message: str
    source: str


@dataclass(frozen=True)
class Call:
    """One answer the stand-in sent while a ticket ran: its ground truth (a truth-log line)."""

    intent: str
    needs_human: bool
    drift: str  # the drift kind applied, or "none"
    status: int  # HTTP status sent
    provider: str  # "openai" | "anthropic"
    stream: bool
    system: tuple[str, ...] = ()  # a digest of each system prompt the request carried (red team 6, H6)


@dataclass(frozen=True)
class TicketOutcome:
    """What one run of the triage command did with one ticket, and the verdict against the truth."""

    ticket: Ticket
    exit_code: int | None  # None: killed at the per-ticket timeout
    answer: dict[str, Any] | None  # the JSON object it printed (last JSON-object line of stdout), if any
    stdout: str  # capped, canary redacted
    stderr: str  # the tail, capped, canary redacted
    seconds: float
    calls: tuple[Call, ...]  # the stand-in's answers during this ticket, in order (empty with a URL)
    verdict: Verdict
    reason: str  # one line: why the verdict

    @property
    def drifts(self) -> tuple[str, ...]:
        """The drift kinds the answers of this ticket carried (none: an empty tuple), in order, distinct."""
        return tuple(dict.fromkeys(c.drift for c in self.calls if c.drift != "none"))

    @property
    def drifted(self) -> bool:
        return bool(self.drifts)

    @property
    def truth(self) -> tuple[str, bool] | None:
        """(intent, needs_human) the stand-in meant, from its last answer; None when nothing was called."""
        return (self.calls[-1].intent, self.calls[-1].needs_human) if self.calls else None


@dataclass(frozen=True)
class DriftRun:
    """One run of the inputs: ``status`` is "ran" or "not available: <why>"."""

    status: str
    command: tuple[str, ...] = ()
    target: str = ""  # the profile's name, or the URL
    outcomes: tuple[TicketOutcome, ...] = ()
    skipped: tuple[str, ...] = ()  # ticket ids not run: the run's time was spent
    tapes: Path | None = None  # the scratch tape folder given as CASSETTE_DIR (what a recorder wrote)
    exit_code: int | None = None  # the sandboxed run's own exit code
    details: list[str] = field(default_factory=list)
    # The hosts whose HTTPS the run's stand-in answered (grader/rules/intercept.toml); () when the run could
    # not be given the interception (no network namespace or no bwrap on this machine, or a live URL).
    intercepted: tuple[str, ...] = ()

    @property
    def ran(self) -> bool:
        return self.status == "ran"


# --- inputs ---------------------------------------------------------------------------------------------


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") in ("text", None)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _last_user_message(body: object) -> str:
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content")).strip()
        # A hand-rolled recording may store each message as a [role, text] pair.
        if isinstance(message, list) and len(message) == 2 and message[0] == "user":
            return _text_of(message[1]).strip()
    return ""


def last_user_message(body: object) -> str:
    """The ticket a recorded request body asks about: its last user message (``grade drift`` groups a
    recording's calls by it, as `find_tickets` does)."""
    return _last_user_message(body)


def find_tickets(ctx: Context, limit: int | None = None) -> list[Ticket]:
    """Each recorded request's last user message: distinct, in tape order, at most ``limit``."""
    seen: dict[str, Ticket] = {}
    for tape in sorted(tapes_of(ctx), key=lambda t: t.path):
        for inter in tape.interactions:
            text = _last_user_message(inter.request_body)
            # A leading "-" would be read as an option by the command's argument parser, not as a message.
            if not text or text in seen or len(text) > _MAX_TICKET_CHARS or "\0" in text or text[0] == "-":
                continue
            seen[text] = Ticket(f"T{len(seen) + 1:02d}", text, f"{tape.path}:{inter.line or 1}")
            if limit is not None and len(seen) >= limit:
                return list(seen.values())
    return list(seen.values())


def triage_command(ctx: Context) -> list[str] | None:
    """The command that answers one ticket: the manifest's, or the discovered ``python -m <pkg>``."""
    command = ctx.manifest.triage_command
    return [str(part) for part in command] if command else None


_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
# What the probe sets itself, or what would unseat the sandbox's start-up: never taken from a Makefile.
_NOT_FROM_RECORD = re.compile(r"^(PATH|HOME|PYTHON\w*|LD_\w+|\w*(_KEY|_TOKEN|_BASE_URL|_SECRET))$")
_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_MAKEFILE_CAP = 1_000_000


def record_env(ctx: Context) -> dict[str, str]:
    """The variables the submission's own record path sets: the ``NAME=value`` words that open a recipe line
    of the Makefile's ``record`` target (``DESKBOT_TAPES=record python -m pytest``), read statically.

    They are how its code is told to reach the endpoint instead of its tapes, so the probe gives them to the
    triage command too. Used when the manifest's ``record_command`` is ``make record`` or absent; a value
    holding ``$`` (a make or shell expansion) and credentials, base URLs, ``PATH``, ``HOME`` and ``PYTHON*``
    are never taken.
    """
    record = ctx.manifest.record_command
    if record and list(record) != ["make", "record"]:
        return {}
    for name in _MAKEFILES:
        try:
            raw = read_bytes(ctx.repo / name, cap=_MAKEFILE_CAP, truncate=True)
        except OSError:
            continue
        return _recipe_assignments(raw.decode("utf-8", errors="replace"), "record")
    return {}


def _recipe_assignments(text: str, target: str) -> dict[str, str]:
    found: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if not line.startswith("\t"):
            if line.strip() and not line.lstrip().startswith("#"):
                head = line.split(":", 1)[0] if ":" in line and "=" not in line.split(":", 1)[0] else None
                inside = head is not None and target in head.split()
            continue
        if not inside:
            continue
        command = line.strip().lstrip("@-+").strip()
        try:
            words = shlex.split(command, comments=True)
        except ValueError:
            continue
        for word in words:
            match = _ASSIGNMENT.match(word)
            if match is None:
                break
            name, value = match.groups()
            if "$" not in value and not _NOT_FROM_RECORD.match(name.upper()):
                found.setdefault(name, value)
    return found


# --- staging --------------------------------------------------------------------------------------------


def stage_profile(profile: str | Path, dest: Path) -> tuple[str, Path]:
    """Validate ``profile`` and stage the driver where the sandbox user can read it; (name, profile path).

    Raises ``ProfileError`` (one ``file:line`` line) for a bad profile. The profile itself stays where it
    is: the stand-in that plays it runs outside the sandbox, from the grader's own files.
    """
    from grader.standin_profile import load_profile, resolve_profile

    path = Path(os.path.abspath(resolve_profile(str(profile))))
    loaded = load_profile(path)  # validates, with file:line errors
    _stage_driver(dest)
    return loaded.name, path


def _stage_driver(dest: Path) -> None:
    shutil.copyfile(_GRADER / "_drift_driver.py", dest / "driver.py")
    dest.chmod(0o755)
    (dest / "driver.py").chmod(0o644)


# --- running --------------------------------------------------------------------------------------------


def run_tickets(
    ctx: Context,
    tickets: Sequence[Ticket],
    *,
    profile: str | Path = "drifted",
    url: str | None = None,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    label: str = "drift probe",
    ticket_timeout: float = _TICKET_TIMEOUT,
    lanes: int = 2,
    keys: Mapping[str, str] | None = None,
    withhold: bool = False,
) -> DriftRun:
    """Run ``command`` (default: the triage command) once per ticket against the stand-in playing ``profile``.

    ``lanes``: tickets run that many at a time, each lane a sandboxed run with a network namespace and a
    stand-in of its own (same decisions as one stand-in: they depend on the seed and the request only; every
    run of one message goes to the same lane, so a repeat draws anew).
    ``url``: an endpoint to use instead of a stand-in (the run then has the network, and no truth: calls are
    empty and a verdict is ``correct`` for any answer in the agent's schema). ``env``: more variables for
    the command (e.g. ``CASSETTE_REPLAY_UNTIL``); they win over the probe's own. ``keys``: real keys for a
    live ``url`` (variable -> key), given in place of the canaries: passed in the sandboxed process's
    environment only (``env`` is written to the plan file on disk) and redacted from its output like them.
    ``withhold``: each lane's copy has no committed tape (the drift probe: red team 9, a layer whose record
    mode replays a recorded request and records only what is missing never called the stand-in, and the row
    left the total as unreached; `grade drift`'s arms keep them for ``CASSETTE_REPLAY_UNTIL``).
    Raises ``NotAssessable`` when the grader could not run it (the budget spent, no room, a broken
    interception rule file); ``ProfileError`` for a bad profile.
    """
    from grader.checks.canary import make_canary

    argv = list(command) if command is not None else triage_command(ctx)
    if not argv:
        return DriftRun("not available: no triage command (declare [tool.takehome] triage_command)")
    if not tickets:
        return DriftRun("not available: no recorded request with a user message to re-run", tuple(argv))
    if ctx.env is None:
        reason = ctx.install_error or "the submission's environment was not installed"
        return DriftRun(f"not available: {' '.join(str(reason).split())}", tuple(argv))
    key_env = ctx.manifest.api_key_env
    base_env = ctx.manifest.base_url_env
    # A folder of its own per call: arms of `grade drift` may run at once under the same label.
    # No label in the name: the run sees the path (docs/security.md, guarantee 11).
    tools = Path(tempfile.mkdtemp(prefix="tools-", dir=ctx.workspace.root))
    profile_path: Path | None = None
    if url:
        target = url
        _stage_driver(tools)
    else:
        target, profile_path = stage_profile(profile, tools)
    canaries = {
        "OPENAI_API_KEY": make_canary("OPENAI_API_KEY"),
        "ANTHROPIC_API_KEY": make_canary("ANTHROPIC"),
    }
    if key_env and key_env not in canaries and key_env.replace("_", "").isalnum():
        canaries[key_env] = make_canary(key_env)
    canaries.update(keys or {})
    base_envs = []
    if base_env and base_env not in _BASE_ENVS and base_env.replace("_", "").isalnum():
        anthropic = "ANTHROPIC" in f"{base_env} {key_env or ''}".upper()
        base_envs.append([base_env, anthropic])
    # One sandboxed run per lane, each in a network namespace of its own: an agent that hard-codes its
    # provider's host reaches the one stand-in of its namespace through the interception (443 cannot tell
    # two lanes apart), so each lane's truth log stays its own.
    budget = float(ctx.timeout)
    groups = _lanes(tickets, lanes)
    intercept = url is None and can_intercept()
    lane = partial(
        _run_lane,
        ctx,
        argv=argv,
        tools=tools,
        url=url,
        profile=profile_path,
        canaries=canaries,
        base_envs=base_envs,
        env=dict(env or {}),
        label=label,
        ticket_timeout=min(ticket_timeout, budget),
        budget=budget,
        intercept=intercept,
        withhold=withhold,
    )
    if len(groups) == 1:
        answers = [lane(groups[0])]
    else:
        with ThreadPoolExecutor(max_workers=len(groups), thread_name_prefix="drift-lane") as pool:
            answers = list(pool.map(lane, groups))
    by_id = {t.id: t for t in tickets}
    order = {t.id: n for n, t in enumerate(tickets)}
    items = [i for a in answers for i in a.items if isinstance(i, dict) and i.get("id") in by_id]
    items.sort(key=lambda i: order[i["id"]])
    ran = [i for i in items if i.get("stopped") is not True]
    outcomes = tuple(_outcome(by_id[i["id"]], i, truth=url is None) for i in ran)
    stopped = [str(i["id"]) for i in items if i.get("stopped") is True]
    left = sorted((str(s) for a in answers for s in a.skipped if s in by_id), key=order.__getitem__)
    skipped = tuple([*stopped, *left])
    code = next((a.exit_code for a in answers if a.exit_code), answers[0].exit_code)
    hosts = tuple(h.name for h in load_hosts()) if intercept else ()
    return DriftRun("ran", tuple(argv), target, outcomes, skipped, answers[0].tapes, code, intercepted=hosts)


def _lanes(tickets: Sequence[Ticket], lanes: int) -> list[list[Ticket]]:
    """Tickets split into at most ``lanes`` groups, every run of one message in the same group: the same
    stand-in then sees a repeated message again and draws its drift anew (its nth occurrence), as a model
    answers a repeated prompt."""
    distinct = list(dict.fromkeys(t.message for t in tickets))
    count = max(1, min(int(lanes), len(distinct)))
    lane_of = {message: n % count for n, message in enumerate(distinct)}
    groups: list[list[Ticket]] = [[] for _ in range(count)]
    for ticket in tickets:
        groups[lane_of[ticket.message]].append(ticket)
    return groups


@dataclass(frozen=True)
class _LaneAnswer:
    items: list[dict[str, Any]]
    skipped: list[str]
    tapes: Path
    exit_code: int | None


def _run_lane(
    ctx: Context, tickets: list[Ticket], *, tools: Path, intercept: bool, withhold: bool, **run: Any
) -> _LaneAnswer:
    """One lane: a scratch copy, a plan, and one sandboxed run of the driver (with its own stand-in).

    ``run``: `_run_driver`'s keyword arguments (argv, url, profile, canaries, base_envs, env, label,
    ticket_timeout, budget)."""
    cassette_dir = ctx.manifest.cassette_dir
    if withhold and cassette_dir is not None:
        scratch = ctx.scratch_copy_without(_slug(run["label"]), cassette_dir, is_tape_file)[0]
    else:
        scratch = ctx.scratch_copy(_slug(run["label"]))
    # The lane's own public folder (its plan, hosts file, CA certificate) beside the shared staged tools.
    own = Path(tempfile.mkdtemp(prefix="p-", dir=tools))
    own.chmod(0o755)
    # Only the grader's user can open this folder and it is never shown to the run: the stand-in's truth log
    # and error log, and the leaf's key until the TLS end has loaded (and deleted) it.
    private = Path(tempfile.mkdtemp(prefix="k-", dir=ctx.workspace.root))
    private.chmod(0o700)
    try:
        return _run_driver(ctx, tickets, scratch, own, private, tools=tools, intercept=intercept, **run)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _run_driver(
    ctx: Context,
    tickets: list[Ticket],
    scratch: Path,
    own: Path,
    private: Path,
    *,
    argv: list[str],
    tools: Path,
    url: str | None,
    profile: Path | None,
    intercept: bool,
    canaries: dict[str, str],
    base_envs: list[list[Any]],
    env: dict[str, str],
    label: str,
    ticket_timeout: float,
    budget: float,
) -> _LaneAnswer:
    """Write the lane's plan (its stand-in and, with ``intercept``, its interception), run the driver, read
    its answer and give each ticket the stand-in's answers sent while it ran."""
    tapes = scratch / ".recorded-tapes"
    run_env = {**canaries, "DRIFT_TOOLS": str(tools)}  # a path in env is what the sandbox makes visible
    helpers: list[tuple[str, ...]] = []
    overlays: dict[str, Path] = {}
    truth = private / "truth.jsonl"
    if url is None:
        assert profile is not None
        port = _free_port() if helpers_share_host_network() else _STANDIN_PORT
        prefixes: tuple[str, ...] = ()
        if intercept:
            venv = ctx.env.venv if ctx.env else None
            try:
                made = prepare(own, private, forward_port=port, lifetime=budget + 30.0, venv=venv)
            except InterceptRulesError as exc:  # the kit's own data is wrong: not the candidate's doing
                raise NotAssessable(f"{label}: {exc}") from None
            helpers.append(made.helper)
            overlays, prefixes = made.overlays, made.path_prefixes
            run_env.update(made.env)
        standin = [sys.executable, "-I", str(_GRADER / "_standin_helper.py"), "--profile", str(profile)]
        standin += ["--port", str(port), "--truth-log", str(truth), "--error-log", str(private / "err")]
        standin += ["--lifetime", f"{budget + 30.0:g}"]
        for prefix in prefixes:
            standin += ["--path-prefix", prefix]
        helpers.insert(0, tuple(standin))
        url_used = f"http://127.0.0.1:{port}/v1"
    else:
        url_used = url
    plan = {
        "command": argv,
        "tickets": [{"id": t.id, "message": t.message} for t in tickets],
        "url": url_used,
        "tapes": str(tapes),
        "base_envs": base_envs,
        "env": {"CASSETTE_MODE": "record", **env},
        "secret_envs": sorted(canaries),
        "ticket_timeout": ticket_timeout,
        # One driver's tickets, a budget of their own: the driver stops starting tickets early enough to
        # report the ones it ran before the run itself is stopped.
        "total_timeout": max(budget - min(5.0, budget / 4), 0.5),
    }
    (own / "plan.json").write_text(json.dumps(plan, ensure_ascii=False), encoding="utf-8")
    (own / "plan.json").chmod(0o644)
    run, _audit = ctx.run(
        ["python", "-E", "-s", str(tools / "driver.py"), str(own / "plan.json")],
        cwd=scratch,
        env=run_env,
        timeout=budget,
        loopback=url is None,
        network=url is not None,
        label=label,
        netns_helpers=helpers,
        overlays=overlays,
    )
    answer = marked_answer(run.stdout, _MARKER)
    if answer is None or "error" in answer:
        why = answer.get("error") if answer else f"the driver printed no answer (exit {run.returncode})"
        if answer is None and helpers and ("intercept:" in run.stderr or "standin:" in run.stderr):
            why = _last_line(run.stderr)
        if run.timed_out:
            why = f"the run took longer than {budget:g} s"
        raise NotAssessable(f"{label}: {why}")
    items = [i for i in answer.get("tickets", []) if isinstance(i, dict)]
    if url is None:
        _give_calls(items, _truth_lines(truth))
    skipped = [str(s) for s in answer.get("skipped", [])]
    return _LaneAnswer(items, skipped, tapes, run.returncode)


def _free_port() -> int:
    """A port free on the host's loopback now (only where the stand-in cannot have a namespace of its own)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _truth_lines(path: Path) -> list[dict[str, Any]]:
    """The stand-in's truth log (grader-owned, written outside the run): one dict per answer it sent."""
    try:
        data = read_bytes(path, cap=_TRUTH_CAP, truncate=True)
    except OSError:
        return []
    lines = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("t"), (int, float)):
            lines.append(entry)
    return lines


def _give_calls(items: list[dict[str, Any]], truth: list[dict[str, Any]]) -> None:
    """Each ticket's ``calls``: the answers the stand-in sent between the ticket's start and end."""
    for item in items:
        began, ended = item.get("began"), item.get("ended")
        if not isinstance(began, (int, float)) or not isinstance(ended, (int, float)):
            item["calls"] = []
            continue
        item["calls"] = [line for line in truth if began <= line["t"] <= ended]


def _slug(label: str) -> str:
    return "-".join(label.split()) or "drift-run"


# --- verdicts -------------------------------------------------------------------------------------------


def _calls(items: object) -> tuple[Call, ...]:
    calls = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        calls.append(
            Call(
                intent=str(item.get("intent", "")),
                needs_human=item.get("needs_human") is True,
                drift=str(item.get("drift", "none")),
                status=int(item["status"]) if isinstance(item.get("status"), int) else 200,
                provider=str(item.get("provider", "")),
                stream=item.get("stream") is True,
                system=tuple(str(d) for d in item.get("system") or () if isinstance(d, str)),
            )
        )
    return tuple(calls)


def printed_objects(stdout: str) -> Iterator[dict[str, Any]]:
    """The JSON objects an agent printed, most likely answer first: its whole stdout as one object, then
    each line that is one, last line first."""
    candidates = [stdout.strip(), *reversed([line.strip() for line in stdout.splitlines()])]
    for text in candidates:
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value


def _printed_answer(stdout: str) -> dict[str, Any] | None:
    """The agent's answer: its whole stdout as one JSON object, else the last line that is one."""
    return next(printed_objects(stdout), None)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _outcome(ticket: Ticket, item: dict[str, Any], *, truth: bool) -> TicketOutcome:
    code = item.get("exit") if isinstance(item.get("exit"), int) else None
    stdout, stderr = str(item.get("stdout", "")), str(item.get("stderr", ""))
    calls = _calls(item.get("calls"))
    answer = _printed_answer(stdout)
    verdict, reason = _verdict(code, answer, stderr, calls, truth=truth)
    seconds = float(item.get("seconds", 0.0)) if isinstance(item.get("seconds"), (int, float)) else 0.0
    return TicketOutcome(ticket, code, answer, stdout, stderr, seconds, calls, verdict, reason)


def _verdict(
    code: int | None, answer: dict[str, Any] | None, stderr: str, calls: tuple[Call, ...], *, truth: bool
) -> tuple[Verdict, str]:
    if truth and not calls:
        said = _last_line(stderr)
        how = "timed out" if code is None else f"exit {code}" + (f": {said}" if said else "")
        return "unreached", f"made no call to the model endpoint it was given ({how})"
    if code is None:
        return "violation", "gave no answer before the per-ticket timeout"
    if code != 0:
        said = _last_line(stderr)
        if answer is not None and _well_formed(answer):
            # Red team 19, F2: a made-up answer printed for whatever reads stdout, then a non-zero exit, is
            # not a loud failure (as loud-miss's unseen_printed_answer).
            verdict, why = _verdict(0, answer, stderr, calls, truth=truth)
            if verdict == "violation":
                return "violation", f"exit {code} after printing an answer: {why}"
        return "loud", f"exit {code}" + (f": {said}" if said else " (nothing on stderr)")
    if answer is None:
        return "violation", "exit 0 without a JSON object on stdout"
    if set(answer) != ANSWER_KEYS or not isinstance(answer.get("intent"), str):
        return "violation", f"answer {_shown(answer)} is not the agent's schema {{intent, needs_human}}"
    if not isinstance(answer.get("needs_human"), bool):
        return "violation", f"answer {_shown(answer)} has a non-boolean needs_human"
    if not truth:
        return "correct", f"answered {_shown(answer)} (no ground truth from a live endpoint)"
    last = calls[-1]
    if last.status != 200 or last.drift in _NO_ANSWER_DRIFTS:
        what = f"HTTP {last.status}" if last.status != 200 else f"a {last.drift} answer"
        return "violation", f"answered {_shown(answer)} after {what} that held no label: a made-up answer"
    if (answer["intent"], answer["needs_human"]) != (last.intent, last.needs_human):
        meant = _shown({"intent": last.intent, "needs_human": last.needs_human})
        return "violation", f"answered {_shown(answer)}; the model meant {meant}"
    return "correct", f"answered {_shown(answer)} as the model meant"


def _well_formed(answer: dict[str, Any]) -> bool:
    intent, flag = answer.get("intent"), answer.get("needs_human")
    return set(answer) == ANSWER_KEYS and isinstance(intent, str) and isinstance(flag, bool)


def _shown(answer: dict[str, Any]) -> str:
    text = json.dumps(answer, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."
