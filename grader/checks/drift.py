"""The drift probe: the submission's own agent against a model that has moved on (the `model-drift` row).

In a throwaway copy of the pristine checkout, its committed tapes left out (red team 9: a record mode that
replays what it has and records only what is missing never met the drifted model), the triage command
(``[tool.takehome] triage_command``, or the discovered ``python -m <pkg>``) runs once per ticket against the
kit's stand-in playing the shipped ``drifted`` profile, in the sandbox with loopback only, with canary keys
(grader/drift_run.py says exactly what it is given). The tickets are the inputs the candidate recorded: the
last user message of each request in the tapes, distinct, in tape order, the first
``thresholds.drift_tickets`` (8 by default). The triage command, not the record command, is what is run: it is
the only documented path that answers one ticket, so its answer can be held to the stand-in's ground truth
ticket by ticket; a record command (usually the whole suite) shows only its exit code. What the record path
tells the code, though, the triage command gets too: the ``NAME=value`` words that open the Makefile
``record`` recipe's lines (``DESKBOT_TAPES=record``), which is how a submission that is not built on the
template is told to reach the endpoint (grader/drift_run.py ``record_env``). Whatever endpoint the agent picks
for itself, a provider host listed in grader/rules/intercept.toml reaches the same stand-in: in the probe's
own run those names resolve to loopback, where a grader-owned TLS end answers with a certificate from a CA
made for that run (grader/intercept.py, docs/security.md)."""

from __future__ import annotations

import hashlib
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from grader.checks import CheckResult, Finding, register
from grader.checks.demo_refusals import demo_refusals
from grader.details import counted
from grader.drift_run import DriftRun, Ticket, TicketOutcome, find_tickets, record_env, run_tickets
from grader.errors import NotAssessable
from grader.manifest import package_command
from grader.standin_profile import load_profile, resolve_profile

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["drift", "drift_run", "start_drift"]

_LABEL = "drift probe"
# The plain-replay control of a command that failed every ticket: one ticket, as long as a ticket may take.
_CONTROL_TIMEOUT = 30.0
_DEFAULT_TICKETS = 8
_PROFILE = "drifted"
_SHOWN = 3
_UNCOVERED = frozenset({"slow"})


def _limit(ctx: Context) -> int:
    return max(1, int(ctx.thresholds.get("drift_tickets", _DEFAULT_TICKETS)))


def _probe(ctx: Context) -> DriftRun:
    recorded = find_tickets(ctx, _limit(ctx))
    tickets = _again(recorded, _limit(ctx))
    run = run_tickets(ctx, tickets, profile=_PROFILE, label=_LABEL, env=record_env(ctx), withhold=True)
    withhold = True
    if run.ran and not any(o.calls for o in run.outcomes):
        # Nothing reached the stand-in with the tapes withheld: an agent whose live mode the probe cannot find
        # misses loudly there. Judged as before, with its tapes in place (unreached: a reviewer's row, or
        # a refusal of the probe's record mode, which the plain-replay control tells apart).
        run = run_tickets(ctx, tickets, profile=_PROFILE, label=_LABEL, env=record_env(ctx))
        withhold = False
    run = _cover(ctx, run, recorded, withhold=withhold)
    entry = package_command(ctx.repo)
    if not run.ran or not entry or list(entry) == list(run.command):
        return run
    # The manifest names another command than the package's own `python -m <pkg>`, which the brief, the
    # README and `make demo` use (red team 9: a strict twin declared beside a sloppy entry point). The entry
    # point meets the drifted model too; where it reached the model, its violations are the ticket's.
    other = run_tickets(
        ctx, tickets, profile=_PROFILE, label=_LABEL, env=record_env(ctx), withhold=True, command=entry
    )
    return _worse(run, other) if other.ran else run


def _cover(ctx: Context, run: DriftRun, tickets: list[Ticket], *, withhold: bool) -> DriftRun:
    """``run`` with one more run of tickets for the drift kinds its draws did not reach, each answer there
    drifting in turn (``order: rotate``) from a start the inputs pick (red team 27, F3: the draws are a
    function of the seed and the requests, so a submission could see in advance which five of fifteen kinds
    it would meet, and default only on the others)."""
    if not run.ran or not tickets or not any(o.calls for o in run.outcomes):
        return run
    shipped = resolve_profile(_PROFILE)
    profile = load_profile(shipped)
    met = {kind for o in run.outcomes for kind in o.drifts}
    # `slow` only costs time (an agent that gives up early meets it in the draws); the rest is sent.
    missing = [
        d.kind for d in profile.drifts if d.rate > 0 and d.kind not in met and d.kind not in _UNCOVERED
    ]
    if not missing:
        return run
    # The start follows from the inputs: the same submission meets the same kinds on the same tickets in
    # every grade (its verdict is reproducible); every kind is sent whichever start it is.
    digest = hashlib.sha256("\n".join(t.message for t in tickets).encode("utf-8", "surrogateescape")).digest()
    start = int.from_bytes(digest[:4], "big") % len(missing)
    data = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    data.update(order="rotate", seed=start)
    data["drift"] = {kind: {**data["drift"][kind], "rate": 1 / len(missing)} for kind in missing}
    cover = [
        replace(tickets[i % len(tickets)], id=f"{tickets[i % len(tickets)].id}.c{i + 1}")
        for i in range(len(missing))
    ]
    with tempfile.TemporaryDirectory(prefix="grader-drift-") as folder:
        path = Path(folder) / f"{_PROFILE}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        # One lane: each lane's stand-in keeps its own turn, so two would send the first kinds twice.
        more = run_tickets(
            ctx, cover, profile=path, label=_LABEL, env=record_env(ctx), withhold=withhold, lanes=1
        )
    if not more.ran:
        return replace(
            run,
            details=[*run.details, f"drift probe: also sent nothing more: the cover run {more.status}"],
        )
    note = (
        f"drift probe: also sent the {counted(len(missing), 'drift kind')} its draws did not reach "
        f"({', '.join(missing)}), in turn from the {_ordinal(start + 1)}, one run each"
    )
    return replace(run, outcomes=(*run.outcomes, *more.outcomes), details=[*run.details, note])


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _worse(run: DriftRun, other: DriftRun) -> DriftRun:
    """``run`` with each ticket's outcome replaced by ``other``'s where only that one is a violation."""
    theirs = {o.ticket.id: o for o in other.outcomes}
    outcomes = []
    for mine in run.outcomes:
        twin = theirs.get(mine.ticket.id)
        if twin is not None and twin.verdict == "violation" and mine.verdict != "violation":
            mine = replace(twin, reason=f"{twin.reason} (from `{' '.join(other.command)}`)")
        outcomes.append(mine)
    shown = " ".join(other.command)
    found = sum(o.verdict == "violation" for o in other.outcomes)
    note = f"drift probe: also ran the package's own `{shown}`: {counted(found, 'violation')}"
    return replace(run, outcomes=tuple(outcomes), details=[*run.details, note])


def _again(tickets: list[Ticket], limit: int) -> list[Ticket]:
    """Fewer recorded inputs than the limit: run them again (``T01.2``, ...) up to it. The stand-in draws a
    repeated request's drift anew, so three recorded inputs still meet about as many drifted answers as eight
    (three tickets that all came back undrifted said nothing about the parser)."""
    out = list(tickets)
    rounds = 2
    while tickets and len(out) < limit:
        for ticket in tickets:
            if len(out) >= limit:
                break
            out.append(replace(ticket, id=f"{ticket.id}.{rounds}"))
        rounds += 1
    return out


def start_drift(ctx: Context) -> None:
    """Start the probe in the background (``--jobs`` above 1), alongside the replay suite and other checks."""
    if ctx.env is None:
        return

    def probe() -> DriftRun | NotAssessable | None:
        try:
            return _probe(ctx)
        except NotAssessable as exc:  # the budget was spent, the driver gave no answer: never run it twice
            return exc
        except Exception:  # e.g. no room for the scratch copy: the check runs it itself and says why
            return None

    ctx.start_probe(_LABEL, probe)


@register("drift", probes=start_drift)
def drift(ctx: Context) -> CheckResult:
    """A model that drifted: every drifted answer handled right or failed loudly, none mislabelled or made up.

    Facts:
        probe: "ran", or "not available: <why>" (no triage command, no tape with a user message, the
            environment not installed); then every count below is 0
        tickets: tickets run: recorded user messages from the tapes, each through the triage command once;
            fewer recorded messages than ``thresholds.drift_tickets`` are run again (``T01.2``) up to it,
            since the stand-in draws a repeated request's drift anew
        drifted: tickets whose model answer carried a drift (the stand-in's truth log says which)
        handled: drifted tickets answered with the label the model meant, in the agent's schema
        loud: drifted tickets where the command exited non-zero (a raised error, a refusal to guess)
            without printing a made-up answer on stdout
        violations: drifted tickets answered wrongly with exit 0, or whose non-zero exit came after
            printing such an answer (red team 19): a wrong label, a made-up answer after a
            refusal, an empty or cut answer or an HTTP error, output not the agent's {intent, needs_human},
            or no answer before the per-ticket timeout
        undrifted_violations: the same kinds of failure on an answer that carried no drift
        unreached: tickets for which the command made no call to the stand-in, neither through the base
            URL it was given nor to a provider host the probe intercepts (grader/rules/intercept.toml: in
            the probe's run those hosts' HTTPS is answered by the stand-in); when that is every ticket and
            the command answered each (exit 0) the row goes to a reviewer (manual): the probe cannot reach
            the agent's endpoint to drift an answer; when it failed or hung before calling, nothing was
            met and the row scores so, unless the command fails the first such ticket the same way in
            plain replay (none of the probe's record switches): then it was not refusing the probe, its
            live mode is one the probe cannot find, and the row goes to a reviewer too
        not_run: tickets left out because the run's time (--timeout) was spent
        kinds: drift kinds seen, each with its counts {tickets, handled, loud, violations}
        violation_kinds: drift kinds with at least one violation, sorted
        demo_made_up: answer lines `make demo` printed, exiting 0, with every recorded answer replaced by a
            refusal, that its own run did not print (red team 21, F1b: a batch path defaulting on answers it
            cannot parse; grader/checks/demo_refusals.py); looked at only while the row could score 2 or 3
        summary: e.g. "5 drifted answers of 8 tickets: 2 handled, 3 failed loudly, no violation"
    """
    if ctx.env is None and not ctx.install_failed:
        raise NotAssessable(ctx.install_error or "the environment was not built")
    run = drift_run(ctx)
    if isinstance(run, NotAssessable):
        raise run
    if not run.ran:
        return CheckResult(facts={**_empty(run.status), "summary": f"drift probe {run.status}"})
    return _result(ctx, run)


def drift_run(ctx: Context) -> DriftRun | NotAssessable:
    """The probe's run, made once per grade: the one `start_drift` started, else made now. The drift check
    reads it, and loud-miss the system prompts the agent sent in it (red team 6, H6)."""

    def make() -> DriftRun | NotAssessable:
        started = ctx.probe_result(_LABEL)
        if isinstance(started, (DriftRun, NotAssessable)):
            return started
        try:
            return _probe(ctx)
        except NotAssessable as exc:
            return exc

    return ctx.memo("drift probe run", make)


def _empty(status: str) -> dict[str, Any]:
    counts: tuple[str, ...] = (
        "tickets",
        "drifted",
        "handled",
        "loud",
        "violations",
        "undrifted_violations",
        "unreached",
    )
    counts += ("not_run", "demo_made_up")
    return {"probe": status, **dict.fromkeys(counts, 0), "kinds": {}, "violation_kinds": []}


def _result(ctx: Context, run: DriftRun) -> CheckResult:
    drifted = [o for o in run.outcomes if o.drifted]
    plain = [o for o in run.outcomes if not o.drifted and o.verdict != "unreached"]
    verdicts = Counter(o.verdict for o in drifted)
    kinds: dict[str, dict[str, int]] = {}
    for outcome in drifted:
        for kind in outcome.drifts:
            row = kinds.setdefault(kind, {"tickets": 0, "handled": 0, "loud": 0, "violations": 0})
            row["tickets"] += 1
            key = {"correct": "handled", "loud": "loud", "violation": "violations"}.get(outcome.verdict)
            if key:
                row[key] += 1
    facts: dict[str, Any] = {
        **_empty("ran"),
        "tickets": len(run.outcomes),
        "drifted": len(drifted),
        "handled": verdicts["correct"],
        "loud": verdicts["loud"],
        "violations": verdicts["violation"],
        "undrifted_violations": sum(o.verdict == "violation" for o in plain),
        "unreached": sum(o.verdict == "unreached" for o in run.outcomes),
        "not_run": len(run.skipped),
        "kinds": dict(sorted(kinds.items())),
        "violation_kinds": sorted(k for k, row in kinds.items() if row["violations"]),
    }
    bad = [o for o in drifted if o.verdict == "violation"]
    failed = [o for o in run.outcomes if o.verdict == "unreached" and o.exit_code != 0]
    same = None
    if facts["tickets"] and facts["unreached"] == facts["tickets"] and failed:
        same = _fails_without_the_switches(ctx, run, failed[0])
    facts["summary"] = _summary(facts, bad, failed, same)
    command = " ".join(run.command)
    findings = [
        Finding(
            "drift-violation",
            f"{'+'.join(o.drifts)} answer to ticket {o.ticket.id} (recorded at {o.ticket.source}): "
            f"`{command}` {o.reason}",
            o.ticket.source,
        )
        for o in bad
    ]
    demo = demo_refusals(ctx) if facts["drifted"] and facts["violations"] * 4 <= facts["drifted"] else None
    if demo is not None and demo.made_up:
        facts["demo_made_up"] = len(demo.made_up)
        said = (
            f"`make demo` exited 0 with every recorded answer a refusal and printed "
            f"{counted(len(demo.made_up), 'answer')} its own run did not (first: {demo.made_up[0]!r})"
        )
        facts["summary"] += f"; {said}"
        findings.append(Finding("drift-violation", f"{said}: its batch path makes answers up", demo.where))
    # The record target's own variables, less the two the probe sets anyway (named once in the line).
    own = {k: v for k, v in record_env(ctx).items() if k not in ("CASSETTE_MODE", "CASSETTE_DIR")}
    given = " ".join(f"{k}={v}" for k, v in sorted(own.items()))
    also = f", and the record target's own {given}" if given else ""
    details = [
        f"drift probe: `{command}` ran {counted(len(run.outcomes), 'ticket')} against the stand-in's "
        f"{run.target} profile in the sandbox (loopback only, canary keys, CASSETTE_MODE=record, a scratch "
        f"CASSETTE_DIR{also}); {_reach(run)}"
    ]
    details += [_line(o) for o in run.outcomes]
    details += [
        line for line in run.details if line.startswith(("drift probe: also ran", "drift probe: also sent"))
    ]
    if run.skipped:
        details.append(f"drift probe: not run for lack of time: {', '.join(run.skipped)}")
    manual = None
    if facts["tickets"] and facts["unreached"] == facts["tickets"] and (not failed or same):
        # The agent reached neither the base URL nor an intercepted host (a provider not in
        # grader/rules/intercept.toml, a pinned certificate, its own settings): the stand-in never got a
        # call to drift. That is a way of building an agent, not a failure to handle drift. A reviewer
        # judges the parser by reading it.
        manual = (
            f"{facts['summary']}. The probe could not serve this agent a drifted answer: judge by reading "
            "how its parser meets a code fence, prose around the JSON, an unknown label, a refusal or a cut "
            "answer."
        )
    return CheckResult(facts=facts, findings=findings, details=details, manual=manual)


def _fails_without_the_switches(ctx: Context, run: DriftRun, first: TicketOutcome) -> str | None:
    """When no ticket reached the stand-in and some failed: does the command fail that ticket the same way
    in plain replay (none of the probe's record switches, no stand-in)? Then its failure is not a refusal
    of the probe's record mode (red-team R10) but how it answers that input anyway, e.g. a loud replay miss
    because the prompt wraps the message the tapes recorded. Returns the evidence, or None when it differs.
    """
    copy = ctx.scratch_copy("triage-replay")
    env = {"CASSETTE_MODE": "replay", "CASSETTE_MISS_LOG": str(ctx.log_path("replay", ".misses.jsonl"))}
    result, _ = ctx.run(
        [*run.command, first.ticket.message],
        cwd=copy,
        env=env,
        timeout=_CONTROL_TIMEOUT,
        label="triage-replay",
    )
    if first.exit_code is None or result.timed_out or result.returncode != first.exit_code:
        return None
    return (
        f"{first.ticket.id} failed the same way in plain replay, without the probe's record switches "
        f"(exit {first.exit_code} both times): the command's live mode is one the probe cannot find"
    )


def _reach(run: DriftRun) -> str:
    """How the agent could reach the stand-in: the base-URL variables, and the intercepted hosts if any."""
    if not run.intercepted:
        return "the stand-in was given through the base-URL variables only (no interception on this machine)"
    hosts = ", ".join(run.intercepted[:2]) + (
        f" and {len(run.intercepted) - 2} more" if len(run.intercepted) > 2 else ""
    )
    return (
        f"the stand-in was given through the base-URL variables and answered HTTPS to {hosts} "
        "(grader/rules/intercept.toml) with a certificate from a CA made for this run"
    )


def _line(o: TicketOutcome) -> str:
    drift = "+".join(o.drifts) or "no drift"
    return f"{o.ticket.source} ticket {o.ticket.id} ({drift}): {o.verdict}: {o.reason}"


def _summary(
    facts: dict[str, Any], bad: list[TicketOutcome], failed: list[TicketOutcome], same: str | None
) -> str:
    """``failed``: the unreached tickets whose command exited non-zero; ``same``: the plain-replay control's
    evidence when it failed the first of them the same way (`_fails_without_the_switches`)."""
    if facts["tickets"] == 0:
        return "drift probe ran no ticket: the run's time was spent"
    if facts["unreached"] == facts["tickets"] and same:
        return (
            f"the triage command made no model call for any of {counted(facts['tickets'], 'ticket')} and "
            f"failed on {len(failed)} of them; {same}"
        )
    if facts["unreached"] == facts["tickets"] and failed:
        # Red-team R10: refusing (or hanging) before any call is not a way of building an agent: it only
        # keeps the probe away. Sent to a reviewer it would leave the total, raising the percentage.
        how = "timed out" if failed[0].exit_code is None else f"exit {failed[0].exit_code}"
        return (
            f"the triage command made no model call for any of {counted(facts['tickets'], 'ticket')} and "
            f"failed on {len(failed)} of them before calling ({failed[0].ticket.id}: {how}): it did not "
            "run in the probe's record mode"
        )
    if facts["unreached"] == facts["tickets"]:
        return (
            f"the triage command made no model call for any of {counted(facts['tickets'], 'ticket')}: "
            "nothing shows how it meets a drifted answer (does it honour CASSETTE_MODE=record, the base URL, "
            "or call a provider the probe intercepts?)"
        )
    if facts["drifted"] == 0:
        return f"no drifted answer among {counted(facts['tickets'], 'ticket')}: nothing to judge"
    head = (
        f"{counted(facts['drifted'], 'drifted answer')} of {counted(facts['tickets'], 'ticket')}: "
        f"{facts['handled']} handled, {facts['loud']} failed loudly"
    )
    if facts["not_run"]:
        head += f" ({facts['not_run']} more not run: the time was spent)"
    if not bad:
        return f"{head}, no violation"
    shown = "; ".join(f"{'+'.join(o.drifts)} on {o.ticket.id}: {o.reason}" for o in bad[:_SHOWN])
    more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
    return f"{head}, {counted(len(bad), 'violation')}: {shown}{more}"
