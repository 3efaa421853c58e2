"""`grade drift`: acquire and install the submission once, re-record its inputs in two arms, report.

The pipeline only; the parsing and exit codes are grader/cli.py's, the arms grader/drift_report/arms.py's,
the comparisons grader/drift_report/model.py's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from grader import __version__
from grader.drift_report.acceptance import Acceptance
from grader.drift_report.answers import read_exchange, verdict_of
from grader.drift_report.arms import ArmSpec, run_arms
from grader.drift_report.model import Ticket, build_report
from grader.errors import BadInput, NotAssessable
from grader.loopback import is_loopback

__all__ = ["arm_spec", "drift", "with_key"]

Progress = Callable[[str, float, str], None]


def arm_spec(name: str, value: str) -> ArmSpec:
    """``--control``/``--candidate``: a URL (http(s)://...) or a stand-in profile, validated before anything
    is fetched. Plain http is refused except to loopback, where nothing leaves the machine."""
    option = f"--{name}"
    if "://" in value:
        parts = urlsplit(value)
        host = parts.hostname or ""
        if parts.scheme not in ("http", "https") or not host:
            raise BadInput(
                f"{option} {value!r}: a URL must be http(s)://HOST/...; or give a profile name or file"
            )
        if parts.username or parts.password:
            raise BadInput(f"{option}: put no credentials in the URL; the key comes from the environment")
        if parts.scheme == "http" and not is_loopback(host):
            raise BadInput(f"{option} {value!r}: plain http would send the key in clear; use https")
        shown = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        return ArmSpec(name=name, spec=shown, url=value)
    from grader.standin_profile import ProfileError, load_profile, resolve_profile

    try:
        load_profile(resolve_profile(value))
    except ProfileError as exc:
        raise BadInput(f"{option}: {exc}") from None
    return ArmSpec(name=name, spec=value, profile=value)


def with_key(arm: ArmSpec, key_env: str | None) -> ArmSpec:
    """A live arm with its key, from the grader's environment variable the submission reads its key from."""
    if not arm.url:
        return arm
    env_name = key_env or "OPENAI_API_KEY"
    key = os.environ.get(env_name, "")
    if not key:
        raise BadInput(
            f"--{arm.name} is a live endpoint: set {env_name} (the submission's api_key_env) to its key"
        )
    return replace(arm, key_env=env_name, key=key)


def _recorded(ctx: Any, probe_tickets: list[Any]) -> tuple[list[Ticket], dict[str, Any]]:
    """The report's tickets with what the recording says about each, and the recording's summary."""
    from grader.drift_run import last_user_message
    from grader.tapes import tapes_of

    tapes = tapes_of(ctx)
    by_message: dict[str, list[Any]] = {}
    served = None
    for tape in tapes:
        for interaction in tape.interactions:
            by_message.setdefault(last_user_message(interaction.request_body), []).append(interaction)
            served = served or interaction.served_model or tape.served_model
    tickets = []
    for probe in probe_tickets:
        exchanges = [read_exchange(i) for i in by_message.get(probe.message, [])]
        tokens = [e.tokens for e in exchanges]
        tickets.append(
            Ticket(
                id=probe.id,
                message=probe.message,
                where=probe.source,
                recorded=verdict_of(exchanges[0].text) if exchanges else None,
                recorded_calls=len(exchanges) if exchanges else None,
                recorded_tools=tuple(t for e in exchanges for t in e.tools),
                requested_model=next((i.model for i in by_message.get(probe.message, []) if i.model), None),
                recorded_tokens=sum(t for t in tokens if t is not None)
                if tokens and None not in tokens
                else None,
            )
        )
    folder = ctx.manifest.cassette_dir
    recording = {
        "tapes": sum(1 for t in tapes if t.interactions),
        "dir": folder.as_posix() if folder is not None else "(discovered)",
        "served_model": served,
    }
    return tickets, recording


def drift(
    target: str,
    *,
    control: str,
    candidate: str,
    acceptance: Acceptance,
    trials: int = 1,
    replay_until: int | None = None,
    model: str | None = None,
    timeout: float = 300.0,
    cache_root: Path | None = None,
    keep_workspace: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The `grade-drift/1` report of TARGET; raises BadInput for an unusable target or arm."""
    from grader.acquire import acquire
    from grader.install import InstallFailed, default_cache_root, ensure_env
    from grader.manifest import not_a_submission, read_manifest
    from grader.sandbox import host_shortfall

    say = progress or (lambda step, seconds, message: None)
    shortfall = host_shortfall()
    if shortfall is not None:
        raise NotAssessable(shortfall)
    arms = (arm_spec("control", control), arm_spec("candidate", candidate))
    root = Path(tempfile.mkdtemp(prefix="grade-drift-"))
    root.chmod(0o711)  # traversable, so the sandbox can hand the checkout to an unprivileged user
    try:
        start = time.monotonic()
        workspace = acquire(target, root)
        manifest = read_manifest(workspace.repo)
        refused = not_a_submission(workspace.repo, manifest)
        if refused:
            raise BadInput(f"{workspace.source}: {refused}")
        if not manifest.triage_command:
            raise BadInput(
                f"{workspace.source}: no triage command to re-run the tickets with; declare "
                "[tool.takehome] triage_command (docs/design.md)"
            )
        arms = (with_key(arms[0], manifest.api_key_env), with_key(arms[1], manifest.api_key_env))
        say(
            "acquire",
            time.monotonic() - start,
            f"{workspace.source} @ {workspace.commit[:12] if workspace.commit else 'no git history'}",
        )
        start = time.monotonic()
        try:
            env = ensure_env(workspace.repo, cache_root=cache_root or default_cache_root(), timeout=timeout)
        except InstallFailed as exc:
            # The submission's own failure, but no arm can run without an environment: nothing to report.
            raise NotAssessable(f"no arm can run: {exc.reason}") from None
        say("install", time.monotonic() - start, f"{'cached' if env.cached else 'installed'}: {env.venv}")

        from grader.context import Context
        from grader.drift_run import find_tickets

        ctx = Context(
            workspace, manifest, env=env, dependencies=env.dependencies, timeout=timeout, budget=None
        )
        ctx.keep_pristine()
        probe_tickets = find_tickets(ctx)
        if not probe_tickets:
            raise BadInput(
                f"{workspace.source}: no recorded request with a user message to re-run "
                "(are the tapes committed?)"
            )
        tickets, recording = _recorded(ctx, probe_tickets)
        runs, arm_info = run_arms(ctx, tickets, *arms, trials=trials, replay_until=replay_until, progress=say)
        notes = _notes(arms, trials, model, arm_info)
        unreached = sum(1 for run in runs if run.live_calls == 0)
        if unreached:
            how = f" under --replay-until {replay_until}" if replay_until is not None else ""
            notes.append(
                f"{unreached} of {len(runs)} runs made no call to their arm (every call came from the tapes"
                f"{how}): they compare the agent with its recording, not the two models"
            )
        return build_report(
            target=workspace.source,
            commit=workspace.commit,
            generated_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            grader_version=__version__,
            arms=arm_info,
            tickets=tickets,
            runs=runs,
            trials=trials,
            acceptance=acceptance,
            recording=recording,
            replay_until=replay_until,
            model=model,
            notes=notes + ([f"workspace kept at {root}"] if keep_workspace else []),
        )
    finally:
        if not keep_workspace:
            shutil.rmtree(root, ignore_errors=True)


def _notes(arms: tuple[ArmSpec, ArmSpec], trials: int, model: str | None, info: dict[str, Any]) -> list[str]:
    notes = []
    if any(a.url for a in arms):
        notes.append(
            "a live endpoint has no ground truth: its runs are judged on the output contract only "
            "(made-up defaults and wrong labels are detected against stand-in profiles)"
        )
        notes.append(
            "network: a live arm runs with the host's network, not limited to the URL's host "
            "(docs/hiring-team.md)"
        )
    if trials > 1 and all(a.profile for a in arms):
        notes.append("a stand-in profile answers the same request the same way: trials repeat exactly")
    served = info["candidate"].served_model
    if model and served and served != model:
        notes.append(f"--model {model}: the candidate's answers said they came from {served}")
    return notes
