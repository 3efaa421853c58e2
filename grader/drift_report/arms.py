"""The two arms of `grade drift`: every ticket re-run against the control and the candidate model.

One sandboxed run per ticket, arm and trial, through `grader.drift_run.run_tickets` (the machine behind the
`model-drift` row): the submission's triage command with the ticket appended, `CASSETTE_MODE=record` and its
own scratch tape folder (`CASSETTE_DIR`), never the committed tapes; against a stand-in profile on loopback,
or a live URL. The arms go ticket by ticket, both arms of a ticket at the same time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.drift_report.answers import read_exchange
from grader.drift_report.model import Arm, Run, Ticket
from grader.errors import NotAssessable
from grader.tapes import load_tapes

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["ArmSpec", "run_arms"]

# The line the template's cassette layer prints at exit under CASSETTE_REPLAY_UNTIL (REPLAY.md).
_CALLS_LINE = re.compile(
    r"^model calls: (\d+) \((\d+) from tape, (\d+) live(?:, (\d+) missed)?\), first live call (\d+|none)$",
    re.M,
)
_NO_ANSWER = frozenset({"refusal", "empty", "truncated", "http_429", "http_500"})


@dataclass(frozen=True)
class ArmSpec:
    """``--control``/``--candidate``: a stand-in profile (name or file) or a live URL, and its key if any."""

    name: str  # "control" | "candidate"
    spec: str  # what the report shows: the profile, or the URL without credentials
    profile: str | None = None
    url: str | None = None
    key_env: str | None = None  # the variable the live key is passed in
    key: str | None = None  # the live key (from the grader's environment); never printed

    @property
    def kind(self) -> str:
        return "url" if self.url else "profile"


Progress = Callable[[str, float, str], None]


def _redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def _classify(outcome: Any, truth: bool) -> tuple[str, str | None, dict[str, Any] | None]:
    """(outcome, class, verdict) of one drift_run TicketOutcome, on the report's scale."""
    answer = outcome.answer
    valid = (
        isinstance(answer, dict)
        and set(answer) == {"intent", "needs_human"}
        and isinstance(answer.get("intent"), str)
        and isinstance(answer.get("needs_human"), bool)
    )
    if outcome.verdict == "loud":
        return "loud", None, None
    if outcome.verdict == "correct":
        return "ok", None, dict(answer)
    if outcome.verdict == "unreached":
        # No call reached the arm (every call served from the tapes under --replay-until): judged on its
        # output only.
        if outcome.exit_code not in (0, None):
            return "loud", None, None
        if valid:
            return "ok", None, dict(answer)
    if outcome.exit_code is None:
        return "violation", "timeout", None
    if answer is None:
        return "violation", "unparseable", None
    if not valid:
        return "violation", "schema", None
    calls = outcome.calls
    if truth and calls and (calls[-1].status != 200 or calls[-1].drift in _NO_ANSWER):
        return "violation", "made_up_default", dict(answer)
    return "violation", "wrong_label", dict(answer)


def _scratch_facts(run: Any) -> tuple[tuple[str, ...] | None, int | None, str | None, int]:
    """(tools called, tokens, served model, exchanges) from the tapes the run wrote in its scratch folder."""
    folder = getattr(run, "tapes", None)
    if folder is None or not Path(folder).is_dir():
        return None, None, None, 0
    folder = Path(folder)
    tools: list[str] = []
    tokens: list[int | None] = []
    served = None
    count = 0
    for tape in load_tapes(folder.parent, Path(folder.name)):
        for interaction in tape.interactions:
            exchange = read_exchange(interaction)
            count += 1
            tools.extend(exchange.tools)
            tokens.append(exchange.tokens)
            served = served or exchange.served_model or tape.served_model
    if not count:
        # Nothing taped (an agent that ignores CASSETTE_DIR, or only error answers): not observed.
        return None, None, None, 0
    total = sum(t for t in tokens if t is not None) if all(t is not None for t in tokens) else None
    return tuple(tools), total, served, count


def _profile_served(profile: str, provider: str, requested: str | None) -> str | None:
    """The model a stand-in profile says it is, for answers nothing was taped from."""
    from grader.standin import served_model
    from grader.standin_profile import load_profile, resolve_profile

    loaded = load_profile(resolve_profile(profile))
    if provider in loaded.served_model:
        return loaded.served_model[provider]
    return served_model(requested, provider, loaded.rules) if requested and provider else None


def _detail(outcome: Any, kind: str) -> str:
    counted = _CALLS_LINE.findall(outcome.stderr or "")
    if outcome.verdict == "unreached" and kind == "ok":
        total, taped = (counted[-1][0], counted[-1][1]) if counted else ("?", "?")
        return (
            f"answered {_shown(outcome.answer)} with no call to the arm: "
            f"{taped} of {total} calls from the tapes"
        )
    return " ".join(str(outcome.reason).split())


def _shown(answer: Any) -> str:
    import json

    return json.dumps(answer, ensure_ascii=False, sort_keys=True)


def _calls(outcome: Any, truth: bool) -> tuple[int | None, int | None]:
    """(model calls, of which live) of one run: the cassette layer's count line, else the stand-in's log."""
    counted = _CALLS_LINE.findall(outcome.stderr or "")
    if counted:
        return int(counted[-1][0]), int(counted[-1][2])
    return (len(outcome.calls), len(outcome.calls)) if truth else (None, None)


def _one(
    ctx: Context, arm: ArmSpec, ticket: Ticket, trial: int, extra_env: dict[str, str]
) -> tuple[Run, str | None]:
    from grader.drift_run import Ticket as ProbeTicket
    from grader.drift_run import run_tickets

    label = f"drift {arm.name} {ticket.id} {trial}"
    kwargs: dict[str, Any] = {"env": dict(extra_env), "label": label}
    if arm.url and arm.key_env and arm.key:
        kwargs["keys"] = {arm.key_env: arm.key}  # in the process's environment, never in a file
    if arm.url:
        kwargs["url"] = arm.url
    else:
        kwargs["profile"] = arm.profile
    result = run_tickets(ctx, [ProbeTicket(ticket.id, ticket.message, ticket.where)], **kwargs)
    secrets = [arm.key or ""]
    if not result.ran or not result.outcomes:
        # The grader could not run it (the triage command and the environment were checked before): not the
        # submission's outcome, and no report could stand on the runs that did happen.
        why = result.status if not result.ran else "the run gave no outcome (its time was spent)"
        raise NotAssessable(f"{arm.name} arm, {ticket.id}: {_redact(why, secrets)}")
    outcome = result.outcomes[0]
    truth = arm.url is None
    kind, cls, verdict = _classify(outcome, truth)
    tools, tokens, served, _count = _scratch_facts(result)
    total_calls, live_calls = _calls(outcome, truth)
    calls = outcome.calls
    if served is None and arm.profile and calls:
        served = _profile_served(arm.profile, calls[0].provider, ticket.requested_model)
    run = Run(
        ticket=ticket.id,
        arm=arm.name,
        trial=trial,
        outcome=kind,
        # The agent's own output: code that was handed a live key may print it anywhere, its answer too.
        verdict={k: _redact(v, secrets) if isinstance(v, str) else v for k, v in verdict.items()}
        if verdict is not None
        else None,
        cls=cls,
        detail=_redact(_detail(outcome, kind), secrets),
        calls=total_calls,
        live_calls=live_calls,
        tools=tools,
        tokens=tokens,
        seconds=float(outcome.seconds),
        drift=tuple(dict.fromkeys(c.drift for c in calls)) if truth else (),
        truth={"intent": calls[-1].intent, "needs_human": calls[-1].needs_human} if truth and calls else None,
    )
    return run, served


def _said(run: Run) -> str:
    drift = [d for d in run.drift if d != "none"]
    return run.outcome + (f" {run.cls}" if run.cls else "") + (f" ({', '.join(drift)})" if drift else "")


def run_arms(
    ctx: Context,
    tickets: Sequence[Ticket],
    control: ArmSpec,
    candidate: ArmSpec,
    *,
    trials: int,
    replay_until: int | None,
    progress: Progress,
) -> tuple[list[Run], dict[str, Arm]]:
    """Every ticket x trial in both arms, interleaved; the runs and what each arm's answers said they were.

    The two arms of one ticket run at the same time (two sandboxes, each with its own stand-in or its own
    connection to the URL), so a live endpoint that changes during the run changes both arms alike, and the
    whole costs about one arm's time.
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    from grader.drift_run import record_env

    # The submission's own record switch (a template-built agent: CASSETTE_MODE=record), as the model-drift
    # probe gives it; --replay-until on top.
    extra = record_env(ctx)
    if replay_until is not None:
        extra["CASSETTE_REPLAY_UNTIL"] = str(replay_until)
    runs: list[Run] = []
    served: dict[str, str | None] = {"control": None, "candidate": None}

    def timed(arm: ArmSpec, ticket: Ticket, trial: int) -> tuple[Run, str | None, float]:
        start = time.monotonic()
        run, model = _one(ctx, arm, ticket, trial, extra)
        return run, model, time.monotonic() - start

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="drift-arm") as pool:
        for trial in range(1, trials + 1):
            for ticket in tickets:
                futures = [pool.submit(timed, arm, ticket, trial) for arm in (control, candidate)]
                for future in futures:
                    run, model, seconds = future.result()
                    served[run.arm] = served[run.arm] or model
                    runs.append(run)
                    progress(run.arm, seconds, f"{ticket.id} trial {trial}: {_said(run)}")
    arms = {
        spec.name: Arm(spec=spec.spec, kind=spec.kind, served_model=served[spec.name])
        for spec in (control, candidate)
    }
    return runs, arms
