"""The `replay` check: the submission's own suite, run offline in the sandbox with no credentials."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.audit import Results
from grader.checks import CheckResult, Finding, register
from grader.context import ReplayRun

if TYPE_CHECKING:
    from grader.context import Context

_MAX_DETAILS = 10


def _zero_facts() -> dict[str, object]:
    return {
        "passed": 0,
        "failed": 0,
        "errors": 0,
        "skipped": 0,
        "xfailed": 0,
        "deselected": 0,
        "network_attempts": 0,
        "first_network_attempt": "",
        "timed_out": False,
        "duration": 0.0,
        "command": "",
        "summary": "",
    }


@register("replay")
def replay(ctx: Context) -> CheckResult:
    """Runs the submission's suite offline (`make test`, else `python -m pytest`) in the sandbox.

    Facts:
        passed: tests that passed
        failed: tests that failed in their call phase
        errors: tests that errored in setup or teardown (collection errors count here too)
        skipped: tests skipped
        xfailed: tests that failed as expected (xfail)
        deselected: tests deselected by the suite's own options
        network_attempts: connection attempts seen by the audit hook or refused by pytest-socket
        first_network_attempt: file:line of the first connection attempt, or "" when none
        timed_out: true when the suite ran past the grader's timeout and was killed
        duration: seconds the suite ran
        command: the command the grader ran (e.g. "make test")
        summary: e.g. "24 passed, 0 failed, 0 errors, 0 connection attempts (make test, 1.2 s)"
    """
    facts = _zero_facts()
    if ctx.env is None:
        facts["summary"] = f"not run: {ctx.install_error}"
        return CheckResult(facts=facts, not_assessable=ctx.install_error)
    rr = ctx.replay_run()
    results = rr.results or Results()
    attempts = _attempts(rr, results)
    facts.update(
        passed=results.passed,
        failed=results.failed,
        errors=results.errors,
        skipped=results.skipped,
        xfailed=results.xfailed,
        deselected=results.deselected,
        network_attempts=len(attempts),
        first_network_attempt=attempts[0][0] if attempts else "",
        timed_out=rr.run.timed_out,
        duration=round(rr.run.duration, 2),
        command=" ".join(rr.command),
    )
    ran = (
        results.passed + results.failed + results.errors + results.skipped + results.xfailed + results.xpassed
    )
    broken = not ran and not rr.run.timed_out
    if broken and rr.run.returncode != 0:
        # Nothing ran and the command failed: collection crashed, or `make test` never reached pytest.
        facts["errors"] = 1
    facts["summary"] = _summary(ctx, rr, facts)

    details = [f"connection attempt at {where}: {what}" for where, what in attempts[:_MAX_DETAILS]]
    details += [f"failed: {line}" for line in results.first_failures]
    if broken:
        tail = _tail(rr.run.stderr) or _tail(rr.run.stdout)
        details.append(f"no test ran; exit {rr.run.returncode}" + (f": {tail}" if tail else ""))
    findings = [Finding(rule="network-attempt", message=what, location=where) for where, what in attempts]
    return CheckResult(facts=facts, findings=findings, details=details)


def _attempts(rr: ReplayRun, results: Results) -> list[tuple[str, str]]:
    """(file:line, what) per distinct attempt: the audit hook's events, then pytest-socket's refusals
    (which happen before a socket exists, so the hook never sees them)."""
    out: dict[tuple[str, str], None] = {}
    for event in rr.audit.network_attempts:
        what = f"{event.event} {event.target}".strip()
        out.setdefault((event.where or "?", what), None)
    for where, what in rr.blocked:
        out.setdefault((where, what), None)
    if not rr.blocked:
        # No JUnit file (the run was killed before pytest wrote it): the result log still names the tests.
        for line in results.first_failures:
            if "SocketBlockedError" in line:
                out.setdefault((line.split(" (", 1)[0], "socket refused by pytest-socket"), None)
    return list(out)


def _tail(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def _summary(ctx: Context, rr: ReplayRun, facts: dict[str, object]) -> str:
    if facts["timed_out"]:
        command, passed = facts["command"], facts["passed"]
        return f"timed out after {ctx.timeout:g} s ({command}, {passed} passed before the kill)"
    attempts = facts["network_attempts"]
    noun = "connection attempt" if attempts == 1 else "connection attempts"
    return (
        f"{facts['passed']} passed, {facts['failed']} failed, {facts['errors']} errors, {attempts} {noun} "
        f"({facts['command']}, {rr.run.duration:.1f} s)"
    )
