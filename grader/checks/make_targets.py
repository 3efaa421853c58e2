"""The `make-targets` check: `make record`, `test` and `demo` exist and behave, offline and keyless."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import CheckResult, register
from grader.checks.demo_run import demo_run
from grader.checks.replay import suite_passed
from grader.checks.unbacked import unbacked_passes
from grader.context import makefile_target_lines
from grader.details import counted
from grader.tapes import tapes_of

if TYPE_CHECKING:
    from grader.audit import AuditLog
    from grader.context import Context
    from grader.sandbox import RunResult

__all__ = ["make_targets"]

# A refusal is a sentence for a human, not a log dump: longer output suggests the recorder got going.
_SHORT_MESSAGE_CHARS = 2000
_NAMED_TAPES = 3  # tapes the demo's detail line names before "and N more"


@register("make-targets")
def make_targets(ctx: Context) -> CheckResult:
    """Checks the Makefile's record, test and demo targets; runs demo and a keyless record in the sandbox.

    Facts:
        has_record: the Makefile has a `record` target
        has_test: the Makefile has a `test` target
        has_demo: the Makefile has a `demo` target
        test_passed: `make test` was the replay command and it passed by the grader's verdict: exit 0 in
            time, every test it ran passed, nothing forged, no hidden failure, no pass on an answer no
            recording gave (offline-replay's unbacked_passes) (not merely exit 0)
        demo_passed: `make demo` exited 0 offline with no connection attempt
        demo_read_tapes: that `make demo` run opened at least one of the submission's tapes for reading: a
            file the tape reader parses as a recording (grader/tapes.py: any format, one tape per file or a
            cassette of many, in the declared or discovered cassette folder), as the audit hook saw it in
            the run's Python processes (the submission's venv); a demo that printed a saved table opened none
        record_refuses_without_key: `make record` with no key exited non-zero with a short message, no
            traceback and no connection attempt (run in a scratch copy)
        summary: e.g. "record, test, demo present; test passed; demo passed, read 24 tapes; record refuses
            without a key"
    """
    targets = makefile_target_lines(ctx.repo)
    facts: dict[str, object] = {
        "has_record": "record" in targets,
        "has_test": "test" in targets,
        "has_demo": "demo" in targets,
        "test_passed": False,
        "demo_passed": False,
        "demo_read_tapes": False,
        "record_refuses_without_key": False,
        "summary": "",
    }
    present = [t for t in ("record", "test", "demo") if facts[f"has_{t}"]]
    missing = [t for t in ("record", "test", "demo") if not facts[f"has_{t}"]]
    shape = (", ".join(present) + " present" if present else "no record/test/demo target") + (
        f"; missing {', '.join(missing)}" if missing and present else ""
    )
    if ctx.env is None:
        facts["summary"] = f"{shape}; not run: {str(ctx.install_error).splitlines()[0]}"
        if ctx.install_failed:  # the submission's own dependencies: scored as not run
            return CheckResult(facts=facts)
        return CheckResult(facts=facts, not_assessable=ctx.install_error)

    # One line per target a reviewer can check against the Makefile: where the rule is and what its run did.
    details: list[str] = [f"Makefile: no `{t}` target" for t in missing]
    parts = [shape]
    if facts["has_test"]:
        rr = ctx.replay_run()
        # The grader's verdict, not the exit status: a forged or hiding run that exits 0 did not pass.
        # Red team 23, F1: a pass on a hand-edited tape (or another answer no recording gave) is the
        # failure it would have been, as offline-replay counts it.
        unbacked = unbacked_passes(ctx)
        ok = rr.command == ["make", "test"] and suite_passed(rr) and not unbacked
        facts["test_passed"] = ok
        if rr.command != ["make", "test"]:
            # Its recipe makes an environment over the network (`uv run pytest`): not run offline as is.
            parts.append(f"test not run as `make test` (the suite ran as `{' '.join(rr.command)}`)")
            details.append(f"{targets['test']} test: {rr.how}")
        else:
            parts.append("test passed" if ok else "test failed")
            if unbacked and suite_passed(rr):
                details.append(
                    f"{targets['test']} test: {counted(len(unbacked), 'test')} passed on answers no "
                    f"recording gave (first: {unbacked[0]}; see offline-replay): not a pass"
                )
            verdict = "passed" if ok else "did not pass"
            details.append(
                f"{targets['test']} test: ran as `make test`, offline with no credentials; {verdict} by the "
                "grader's verdict on its JUnit report (the run is offline-replay's)"
            )
        if not ok and rr.command == ["make", "test"] and rr.run.returncode == 0 and not rr.run.timed_out:
            details.append(
                f"{targets['test']} make test exited 0, but the grader's verdict on the run is not a pass "
                "(see offline-replay)"
            )
    if facts["has_demo"]:
        run, audit = demo_run(ctx)
        # A non-Python process's attempt is counted by the run's network namespace (red team 5, G6).
        attempts = len(audit.network_attempts) or (1 if run.no_route else 0)
        ok = run.returncode == 0 and not run.timed_out and not attempts
        facts["demo_passed"] = ok
        read = _tapes_read(ctx, audit)
        facts["demo_read_tapes"] = bool(read)
        if not ok:
            parts.append("demo failed")
            how = _why(run, attempts)
        elif read:
            parts.append(f"demo passed, read {counted(len(read), 'tape')}")
            shown = ", ".join(read[:_NAMED_TAPES]) + (
                f" and {len(read) - _NAMED_TAPES} more" if len(read) > _NAMED_TAPES else ""
            )
            how = f"exit 0 offline, no connection attempt, read {counted(len(read), 'tape')} ({shown})"
        else:
            # G11: `@cat` of a table saved from one real run exits 0 offline too; a replay reads a tape.
            parts.append("demo exited 0 but opened no tape")
            how = (
                "exit 0 offline, no connection attempt, but it opened no tape "
                f"({_no_tape_reason(ctx, audit)}): a canned demo?"
            )
        details.append(f"{targets['demo']} demo: `make demo` in replay, no credentials: {how}")
    if facts["has_record"]:
        scratch = ctx.scratch_copy("record-without-key")
        run, audit = ctx.run(
            ["make", "record"],
            cwd=scratch,
            env={"CASSETTE_MISS_LOG": str(ctx.log_path("record", ".misses.jsonl"))},
            label="make record (no key)",
        )
        output = f"{run.stdout}\n{run.stderr}"
        refused = (
            run.returncode not in (0, None)
            and not run.timed_out
            and "Traceback" not in output
            and len(output.strip()) <= _SHORT_MESSAGE_CHARS
            and not audit.network_attempts
        )
        facts["record_refuses_without_key"] = refused
        parts.append("record refuses without a key" if refused else "record does not refuse cleanly")
        if refused:  # the refusal itself, not make's own "*** [Makefile:19: record] Error 1" after it
            said = next((line.strip() for line in output.splitlines() if line.strip()), "")
            how = f"exit {run.returncode}, no traceback, no connection attempt; said: {said[:160]}"
        else:
            how = _why(run, len(audit.network_attempts), output)
        details.append(f"{targets['record']} record: `make record` with no key, in a scratch copy: {how}")
    facts["summary"] = "; ".join(parts)
    return CheckResult(facts=facts, details=details)


def _tapes_read(ctx: Context, audit: AuditLog) -> list[str]:
    """The submission's tapes (paths, sorted) that a run's audit log shows opened for reading.

    The audit root of a run is its own copy of the tree, so opened paths are repo-relative like the tapes'.
    A file the tape reader cannot parse as a recording (``invalid``) is not a tape a replay reads.
    """
    tapes = {t.path for t in tapes_of(ctx) if t.format != "invalid"}
    return sorted(tapes & {_norm(path) for path in audit.opened})


def _no_tape_reason(ctx: Context, audit: AuditLog) -> str:
    if audit.unsafe:  # the run replaced its audit log: what it opened is unknown, and not credited
        return f"its audit log was not read: {audit.unsafe}"
    tapes = [t for t in tapes_of(ctx) if t.format != "invalid"]
    if not tapes:
        return "the grader found no readable tape in the submission"
    folder = ctx.manifest.cassette_dir
    return f"none of its {counted(len(tapes), 'tape')}" + (f" under {folder.as_posix()}/" if folder else "")


def _norm(path: str) -> str:
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def _why(run: RunResult, attempts: int, output: str | None = None) -> str:
    if run.timed_out:
        return "timed out"
    text = output if output is not None else f"{run.stdout}\n{run.stderr}"
    reasons = [f"exit {run.returncode}"]
    if attempts:
        reasons.append(f"{attempts} connection attempt(s)")
    if "Traceback" in text:
        reasons.append("printed a traceback")
    elif len(text.strip()) > _SHORT_MESSAGE_CHARS:
        reasons.append(f"printed {len(text.strip())} characters")
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
    if last:
        reasons.append(f"last line: {last[:160]}")
    return ", ".join(reasons)
