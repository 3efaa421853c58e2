"""The drift report (`grade-drift/1`) built from what the two arms did, ticket by ticket.

Comparisons, and why these and no others:

* **noise floor**: each control run against the recording. The control plays the model the tapes came from,
  so whatever differs here is noise (a non-deterministic model, a flaky agent), not the new model.
* **candidate vs control**: each candidate run against the control run of the same ticket and trial, never
  against the recording: both arms ran the same way at the same time, so the difference is the model's.
* **contract, termination, tool shape**: per arm, facts about each run (a violation class; calls per
  ticket and tool calls against the recording).

A verdict is the agent's `{"intent", "needs_human"}` when its output kept the contract, else the way it
did not (`loud`, or the violation's class): two runs agree when these are equal.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grader.drift_report.acceptance import CLASSES, CONTRACT_CLASSES, Acceptance
from grader.drift_report.stats import Rate, percent

__all__ = ["ARMS", "SCHEMA", "Arm", "Run", "Ticket", "build_report"]

SCHEMA = "grade-drift/1"
ARMS = ("control", "candidate")


@dataclass(frozen=True)
class Arm:
    """Where an arm's model calls went: a stand-in profile (on loopback) or a live URL."""

    spec: str
    kind: str  # "profile" or "url"
    served_model: str | None = None  # the model the answers said they came from, when any said


@dataclass(frozen=True)
class Ticket:
    """One input of the submission, and what the recording says about it."""

    id: str
    message: str
    recorded: dict[str, Any] | None  # {"intent", "needs_human"} the recorded answer said, if it parses
    recorded_calls: int | None = None  # model calls the recording holds for this ticket
    recorded_tools: tuple[str, ...] = ()  # tool names the recorded answers called (empty: text answers)
    recorded_tokens: int | None = None
    where: str = ""  # the tape (file) the ticket was read from
    requested_model: str | None = None  # the model the recorded request asked for


@dataclass(frozen=True)
class Run:
    """One run of the agent on one ticket in one arm.

    ``outcome``: ``ok`` (the output kept the contract: ``verdict`` holds it), ``loud`` (a non-zero exit or an
    error naming the problem) or ``violation`` (``cls`` says which of CONTRACT_CLASSES).
    ``calls``/``tools``/``tokens`` are None when they could not be observed.
    """

    ticket: str
    arm: str
    trial: int
    outcome: str
    verdict: dict[str, Any] | None = None
    cls: str | None = None
    detail: str = ""
    calls: int | None = None
    live_calls: int | None = None  # of ``calls``, those that reached the arm (the rest came from the tapes)
    tools: tuple[str, ...] | None = None
    tokens: int | None = None
    seconds: float = 0.0
    drift: tuple[str, ...] = ()
    truth: dict[str, Any] | None = None
    differences: tuple[str, ...] = field(default=(), compare=False)

    def key(self) -> tuple[Any, ...]:
        if self.outcome == "ok" and self.verdict is not None:
            return ("ok", self.verdict.get("intent"), self.verdict.get("needs_human"))
        return (self.outcome, self.cls)


def _recorded_key(ticket: Ticket) -> tuple[Any, ...] | None:
    if ticket.recorded is None:
        return None
    return ("ok", ticket.recorded.get("intent"), ticket.recorded.get("needs_human"))


def _with_differences(run: Run, ticket: Ticket) -> Run:
    """The run with its termination / tool-shape differences from the recording filled in."""
    found: list[str] = []
    if run.calls is not None and ticket.recorded_calls is not None and run.calls != ticket.recorded_calls:
        found.append("termination")
    if run.tools is not None and tuple(run.tools) != tuple(ticket.recorded_tools):
        found.append("tool_shape")
    return Run(**{**run.__dict__, "differences": tuple(found)})


def _run_dict(run: Run) -> dict[str, Any]:
    return {
        "trial": run.trial,
        "outcome": run.outcome,
        "verdict": run.verdict,
        "class": run.cls,
        "detail": run.detail,
        "calls": run.calls,
        "live_calls": run.live_calls,
        "tools": list(run.tools) if run.tools is not None else None,
        "tokens": run.tokens,
        "seconds": round(run.seconds, 3),
        "drift": list(run.drift),
        "truth": run.truth,
        "differences": list(run.differences),
    }


def _classes(runs: Sequence[Run]) -> dict[str, int]:
    counts = dict.fromkeys(CLASSES, 0)
    for run in runs:
        if run.outcome == "violation" and run.cls in counts:
            counts[run.cls] += 1
        if run.outcome == "loud":
            counts["loud"] += 1
        for difference in run.differences:
            counts[difference] += 1
    return counts


def _usage(runs: Sequence[Run]) -> dict[str, Any]:
    tokens = [r.tokens for r in runs if r.tokens is not None]
    seconds = [r.seconds for r in runs]
    return {
        # Over the runs whose answers reported usage (an error answer is not taped, so it has none).
        "tokens": sum(tokens) if tokens else None,
        "tokens_runs": len(tokens),
        "seconds_median": round(statistics.median(seconds), 3) if seconds else None,
        "seconds_total": round(sum(seconds), 3),
    }


def _delta(new: Any, old: Any) -> Any:
    if new is None or old is None:
        return None
    return round(new - old, 3)


def _check(name: str, text: str, ok: bool, value: float | int, limit: float | int) -> dict[str, Any]:
    return {"rule": name, "ok": ok, "value": value, "limit": limit, "line": text}


def _rate_check(name: str, what: str, rate: Rate, limit: float) -> dict[str, Any]:
    return _check(
        name,
        f"{what} {rate.count}/{rate.n} ({percent(rate.value)}) at most {percent(limit)}",
        rate.value <= limit,
        round(rate.value, 6),
        limit,
    )


def _judge(rule: Acceptance, candidate: dict[str, Any], difference: Rate) -> dict[str, Any]:
    checks: list[dict[str, Any]] = []
    n = candidate["runs"]
    if rule.max_violation_rate is not None:
        violations = Rate(candidate["violations"], n)
        checks.append(
            _rate_check("max_violation_rate", "contract violations", violations, rule.max_violation_rate)
        )
    for cls in rule.zero:
        count = candidate["classes"][cls]
        checks.append(_check(f"zero:{cls}", f"{cls} {count}/{n}, must be 0", count == 0, count, 0))
    if rule.max_changed_rate is not None:
        checks.append(
            _rate_check("max_changed_rate", "verdicts changed vs control", difference, rule.max_changed_rate)
        )
    if rule.max_loud_rate is not None:
        loud = Rate(candidate["classes"]["loud"], n)
        checks.append(_rate_check("max_loud_rate", "loud failures", loud, rule.max_loud_rate))
    return {
        "rule": rule.as_dict(),
        "verdict": "accept" if all(c["ok"] for c in checks) else "reject",
        "checks": checks,
    }


def build_report(
    *,
    target: str,
    commit: str | None,
    generated_at: str,
    grader_version: str,
    arms: dict[str, Arm],
    tickets: Sequence[Ticket],
    runs: Sequence[Run],
    trials: int,
    acceptance: Acceptance,
    recording: dict[str, Any],
    replay_until: int | None = None,
    model: str | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The `grade-drift/1` report (a JSON-ready dict) of ``runs`` over ``tickets``."""
    by_id = {t.id: t for t in tickets}
    runs = [_with_differences(r, by_id[r.ticket]) for r in runs]
    per_arm = {arm: [r for r in runs if r.arm == arm] for arm in ARMS}
    index = {(r.arm, r.ticket, r.trial): r for r in runs}

    noise = [0, 0]
    changed = [0, 0]
    for ticket in tickets:
        recorded = _recorded_key(ticket)
        for trial in range(1, trials + 1):
            control = index.get(("control", ticket.id, trial))
            candidate = index.get(("candidate", ticket.id, trial))
            if control is not None and recorded is not None:
                noise[1] += 1
                noise[0] += control.key() != recorded
            if control is not None and candidate is not None:
                changed[1] += 1
                changed[0] += candidate.key() != control.key()
    noise_floor = Rate(*noise)
    difference = Rate(*changed)

    summary: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        classes = _classes(per_arm[arm])
        violations = sum(classes[c] for c in CONTRACT_CLASSES)
        summary[arm] = {
            "runs": len(per_arm[arm]),
            "violations": violations,
            "violation_rate": Rate(violations, len(per_arm[arm])).as_dict(),
            "classes": classes,
            **_usage(per_arm[arm]),
        }
    recorded_tokens = [t.recorded_tokens for t in tickets if t.recorded_tokens is not None]
    recording = {
        **recording,
        "tokens": sum(recorded_tokens) * trials if len(recorded_tokens) == len(tickets) and tickets else None,
    }
    # Tokens are compared pair by pair (same ticket and trial, both arms' usage known): an arm whose error
    # answers reported no usage would otherwise look cheaper.
    pairs = [
        (index[("candidate", t.id, k)].tokens, index[("control", t.id, k)].tokens)
        for t in tickets
        for k in range(1, trials + 1)
        if ("candidate", t.id, k) in index and ("control", t.id, k) in index
    ]
    known = [(new, old) for new, old in pairs if new is not None and old is not None]
    deltas = {
        "tokens": sum(new - old for new, old in known) if known else None,
        "tokens_pairs": len(known),
        "tokens_control": sum(old for _new, old in known) if known else None,
        "seconds_median": _delta(
            summary["candidate"]["seconds_median"], summary["control"]["seconds_median"]
        ),
    }
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "target": target,
        "commit": commit,
        "generated_at": generated_at,
        "grader_version": grader_version,
        "settings": {"trials": trials, "replay_until": replay_until, "model": model},
        "denominator": {"tickets": len(tickets), "trials": trials, "runs_per_arm": len(tickets) * trials},
        "arms": {
            name: {"spec": a.spec, "kind": a.kind, "served_model": a.served_model} for name, a in arms.items()
        },
        "recording": recording,
        "tickets": [
            {
                "id": t.id,
                "message": t.message,
                "where": t.where,
                "recorded": t.recorded,
                "recorded_calls": t.recorded_calls,
                "recorded_tools": list(t.recorded_tools),
                **{
                    arm: [
                        _run_dict(index[(arm, t.id, k)])
                        for k in range(1, trials + 1)
                        if (arm, t.id, k) in index
                    ]
                    for arm in ARMS
                },
            }
            for t in tickets
        ],
        "summary": {**summary, "delta": deltas},
        "noise_floor": noise_floor.as_dict(),
        "difference": difference.as_dict(),
        "acceptance": _judge(acceptance, summary["candidate"], difference),
        "notes": list(notes),
    }
    return report
