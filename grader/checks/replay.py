"""The `replay` check: the submission's own suite, run offline in the sandbox with no credentials."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.audit import Results
from grader.checks import CheckResult, Finding, answer_rerun, register
from grader.checks.demo_answers import DemoAnswers, demo_answers
from grader.checks.loud_miss import made_up_passes
from grader.checks.served_answers import Served, served_answers
from grader.checks.unbacked import edit_history, unbacked_passes
from grader.context import ReplayRun
from grader.details import counted
from grader.tamper import GuardLog, Hook
from grader.tape_history import TapeEdit
from grader.tapes import tapes_of

if TYPE_CHECKING:
    from grader.checks.reworded_rerun import Answered
    from grader.context import Context

__all__ = ["replay", "suite_passed"]

_MAX_DETAILS = 10


def _zero_facts() -> dict[str, object]:
    return {
        "passed": 0,
        "failed": 0,
        "errors": 0,
        "skipped": 0,
        "xfailed": 0,
        "deselected": 0,
        "xfail_norun": 0,
        "hidden_failures": 0,
        "tamper_hooks": 0,
        "forged": False,
        "exit_abnormal": False,
        "network_attempts": 0,
        "first_network_attempt": "",
        "timed_out": False,
        "duration": 0.0,
        "command": "",
        "tape_edits": 0,
        "first_tape_edit": "",
        "tapes": 0,
        "made_up_passes": 0,
        "answers_ignored": 0,
        "answers_skipped": False,
        "answers_replaced": 0,
        "demo_answers_kept": 0,
        "unbacked_passes": 0,
        "summary": "",
    }


# First: make-targets and the others reuse its memoized suite run. It then waits for loud-miss's re-worded
# runs (made_up_passes), which start with the suite.
@register("replay", phase="first", probes=answer_rerun.start_answer_probe)
def replay(ctx: Context) -> CheckResult:
    """Runs the submission's suite offline (`make test`, else `python -m pytest`) in the sandbox.

    Facts:
        passed: tests that passed
        failed: tests that failed in their call phase
        errors: tests that errored in setup or teardown (collection errors count here too)
        skipped: tests skipped
        xfailed: tests that failed as expected (xfail)
        deselected: tests deselected by the suite's own options or hooks
        xfail_norun: tests marked xfail(run=False), so never run
        hidden_failures: tests skipped or xfailed in the run that fail (or never finish) when the grader
            reruns them with their skip/skipif/xfail marks stripped, and tests the suite's command leaves
            out (it names test files or ids, or ignores some) that fail when the grader runs every test the
            repository holds
        tamper_hooks: places that can change reported outcomes: conftest/plugin hooks, pytest monkeypatches,
            overrides of the grader's options, start-up files (sitecustomize.py), code that can tell a graded
            run from an ordinary one (a uid comparison, /proc/self/mountinfo) (see docs/security.md)
        forged: true when a reported outcome differs from what happened: a test raised but was reported
            passed, the rerun without the submission's hooks (no conftest files or configured plugins) or the
            clean-interpreter rerun fails tests reported passed or times out where the run finished, the
            suite-writable result log disagrees with the grader's guard log, or the run replaced one of the
            grader's logs (a link, a FIFO)
        exit_abnormal: true when pytest's session never finished (os._exit, a killed interpreter, the grader's
            plugins switched off), or finished before every collected test ran with none failed
            (``pytest.exit()``, an interrupt: red team 12); a timeout is reported as timed_out instead
        network_attempts: connection attempts seen by the audit hook or refused by pytest-socket, or else
            one when the run's network namespace counted packets it had no route for (a process the hook
            does not see: curl, a Python outside the venv)
        first_network_attempt: file:line of the first connection attempt ("(the suite's run)" for the
            namespace's count), or "" when none
        timed_out: true when the suite ran past the grader's timeout and was killed
        duration: seconds the suite ran
        command: the command the grader ran (e.g. "make test")
        tape_edits: recorded responses changed in a later commit while their request (and key) stayed the
            same, not as part of re-recording the whole set (every tape given a new answer; restamped
            metadata is not one): answers edited by hand (read from git history)
        first_tape_edit: commit:file:line of the first such edit, or "" when none
        tapes: readable tapes in the submission (the same count as the other rows): a suite that passes
            with nothing recorded shows no replay, whatever the ratio of its passing tests
        made_up_passes: tests that passed on a request no tape holds in loud-miss's re-worded runs (their
            recorded messages, or the recorded system prompts (red team 6, H1: a cassette that serves the
            tape of the same ticket for a key it lacks), re-worded, the tapes withheld or every tape in
            place): a client that answers
            for itself, so its passes here may be answers nobody recorded too (red team 4, F3); the check
            waits for those runs (they run alongside the suite when loud-miss is in the rubric)
        answers_ignored: tests that read a tape and still passed once every tape's recorded answer was given
            another label (keys untouched), whose ticket the triage command then answered with a label the
            tape did not hold: a layer answering from a table of its own (red team 15, F1)
        answers_skipped: the perturbed-answer rerun could not be made or read (the grade's budget spent,
            the suite's run or the rerun left no per-test outcomes) while there were tapes: no evidence
            either way
        answers_replaced: requests in the suite's run for which the cassette layer opened tapes and the
            HTTP client was handed an answer (label, yes/no value) none of them holds: answers from a table of
            the layer's own, seen in the suite's process whatever request the triage command sends (red
            team 17; httpx/httpx2 clients, responses not streamed)
        demo_answers_kept: answer lines of `make demo`'s output (a label field with its value, or a ticket's
            text and a label) printed the same, at the same place, when the demo ran again offline with
            every tape's answer given another label: answers shown from somewhere other than the tapes (a
            corrections table in a batch path, a saved table: red teams 21 and 22)
        unbacked_passes: answers no recording gave that the suite passed on, by the probes above: each
            hand-edited tape (its answer changed) a passing test read, each tape the agent answered
            otherwise, each tape whose answer the client was handed changed (not made_up_passes: those
            passes were a probe's, not the suite's); each counts as the failure it would have been, once
            (red team 23, F1: a
            hand-edited tape must not score above the honest recording whose tests fail)
        summary: e.g. "24 passed, 0 failed, 0 errors, 0 connection attempts (make test, 1.2 s)"
    """
    facts = _zero_facts()
    history = edit_history(ctx)
    edits = history.edits
    facts.update(tape_edits=len(edits), first_tape_edit=edits[0].location if edits else "")
    facts["tapes"] = sum(t.format != "invalid" for t in tapes_of(ctx))
    no_tapes = "" if facts["tapes"] else "; no recording found"
    edit_findings = [Finding(rule="tape-edited", message=e.message, location=e.location) for e in edits]
    edit_details = [f"tape edited: {e.location}: {e.message}" for e in edits[:_MAX_DETAILS]]
    edit_details += history.notes
    install = _install_findings(ctx)
    if ctx.env is None:
        facts["summary"] = f"not run: {_first_line(ctx.install_error)}" + _edits_summary(edits) + no_tapes
        if ctx.install_failed:
            # The submission's own dependencies (an invalid line, a package that does not exist or does
            # not build): nothing ran, scored as such, the installer's words as evidence.
            details = [f"install: {line}" for line in str(ctx.install_error).splitlines()[1:]]
            return CheckResult(
                facts=facts, findings=[*edit_findings, *install], details=[*edit_details, *details]
            )
        return CheckResult(
            facts=facts,
            findings=[*edit_findings, *install],
            details=edit_details,
            not_assessable=ctx.install_error,
        )
    rr = ctx.replay_run()
    results = rr.results or Results()
    attempts = _attempts(rr, results)
    evidence = _tamper_evidence(rr, results)
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
        xfail_norun=len(rr.guard.notrun) if rr.guard else 0,
        hidden_failures=len(evidence.hidden) + len(evidence.left_out),
        tamper_hooks=len(rr.scan.hooks) if rr.scan else 0,
        forged=bool(evidence.forged),
        exit_abnormal=evidence.abnormal,
    )
    ran = (
        results.passed + results.failed + results.errors + results.skipped + results.xfailed + results.xpassed
    )
    broken = not ran and not rr.run.timed_out
    if broken and rr.run.returncode != 0:
        # Nothing ran and the command failed: collection crashed, or `make test` never reached pytest.
        facts["errors"] = 1
    made_up = made_up_passes(ctx)
    facts["made_up_passes"] = len(made_up)
    answers = answer_rerun.answer_probe(ctx)
    facts["answers_ignored"] = len(answers.ignored) if answers is not None else 0
    # Red team 16: a grade whose budget ran out before the rerun could not look for answers made up on a
    # hit; like the canary probe's skip, that is no evidence of their absence.
    skipped = answers is None and bool(facts["tapes"]) and ctx.manifest.cassette_dir is not None
    facts["answers_skipped"] = skipped
    served = served_answers(ctx)
    replaced = served.replaced if served is not None else []
    facts["answers_replaced"] = len(replaced)
    demo = demo_answers(ctx)
    kept = demo.kept if demo is not None else []
    facts["demo_answers_kept"] = len(kept)
    facts["unbacked_passes"] = len(unbacked_passes(ctx))
    facts["summary"] = (
        _summary(ctx, rr, facts)
        + evidence.summary()
        + _edits_summary(edits)
        + _made_up_summary(made_up)
        + answer_rerun.summary(answers)
        + _replaced_summary(replaced)
        + _demo_summary(demo)
        + ("; the perturbed-answer rerun was not run (see the notes)" if skipped else "")
        + no_tapes
    )

    details = [*edit_details, *evidence.details()]
    details += [
        f"made-up answer: {item.where}: {item.test} passed with {item.inputs} re-worded, on a "
        "request no tape holds (loud-miss's re-worded runs)"
        for item in made_up[:_MAX_DETAILS]
    ]
    details += answer_rerun.details(answers, _MAX_DETAILS)
    details += [f"not from its tape: {x.where}: {_replaced_message(x)}" for x in replaced[:_MAX_DETAILS]]
    details += _demo_details(demo)
    details += [f"connection attempt at {where}: {what}" for where, what in attempts[:_MAX_DETAILS]]
    details += [f"failed: {line}" for line in results.first_failures]
    if broken:
        tail = _tail(rr.run.stderr) or _tail(rr.run.stdout)
        details.append(f"no test ran; exit {rr.run.returncode}" + (f": {tail}" if tail else ""))
    details += _how_run(ctx, rr)
    findings = [Finding(rule="network-attempt", message=what, location=where) for where, what in attempts]
    findings += [
        Finding(
            rule="answer-not-from-tape",
            message=f"{answer_rerun.who(item)} passed with the tape saying {item.now!r}; "
            f"the agent said {item.answered!r}",
            location=item.tape,
        )
        for item in (answers.ignored if answers is not None else [])
    ]
    findings += [Finding("answer-not-from-tape", _replaced_message(item), item.where) for item in replaced]
    if demo is not None and kept:
        what = (
            f"`make demo` printed {_counted_lines(kept)} unchanged with every tape's answer changed "
            f"(first: {kept[0][:120]!r})"
        )
        findings.append(Finding("answer-not-from-tape", what, demo.where))
    findings += [Finding(rule=f"tamper-{h.kind}", message=h.why, location=h.location) for h in evidence.hooks]
    return CheckResult(facts=facts, findings=[*edit_findings, *install, *findings], details=details)


def _replaced_message(item: Served) -> str:
    who = item.test or "a request made outside any test"
    return (
        f"{who}: the cassette layer opened this tape, which holds {item.held}, and the HTTP client was "
        f"handed {item.sent} for {item.message[:80]!r}"
    )


def _replaced_summary(replaced: list[Served]) -> str:
    if not replaced:
        return ""
    first = replaced[0]
    return (
        f"; {counted(len(replaced), 'request')} handed an answer its tape does not hold (first: "
        f"{first.where}: {first.test or 'outside any test'} got {first.sent}, the tape holds {first.held})"
    )


def _counted_lines(lines: list[str]) -> str:
    return counted(len(lines), "answer line")


def _demo_summary(demo: DemoAnswers | None) -> str:
    if demo is None or not demo.kept:
        return ""
    return (
        f"; `make demo` ({demo.where}) printed {_counted_lines(demo.kept)} of {demo.compared} the same with "
        f"every tape's answer changed: not read from the tapes (first: {demo.kept[0][:120]!r})"
    )


def _demo_details(demo: DemoAnswers | None) -> list[str]:
    if demo is None:
        return []
    out = [
        f"{demo.where}: `make demo` answer line kept with the tapes changed: {x[:160]!r}" for x in demo.kept
    ]
    if demo.compared and not demo.kept:
        out.append(f"`make demo`: all {demo.compared} answer lines changed with the tapes' answers")
    return out[:_MAX_DETAILS] + ([demo.note] if demo.note else [])


def _how_run(ctx: Context, rr: ReplayRun) -> list[str]:
    """What was installed (project, lockfile, Python) and how the suite was run, as the evidence's tail."""
    lines = ctx.env.described() if ctx.env is not None else []
    return [*lines, f"suite: {rr.how}"] if rr.how else lines


def _edits_summary(edits: list[TapeEdit]) -> str:
    """Why the default rubric caps the row: the tapes whose recorded answer was edited, and when."""
    if not edits:
        return ""
    first = edits[0]
    noun = "tape's recorded response" if len(edits) == 1 else "tapes' recorded responses"
    kept = f"request only re-keyed ({first.rekeyed})" if first.rekeyed else "request unchanged"
    return (
        f"; {len(edits)} {noun} edited after recording: {first.path} changed in {first.after}, "
        f"{kept} since {first.before}" + (f" ({first.ref}, not in HEAD's history)" if first.ref else "")
    )


def _made_up_summary(made_up: list[Answered]) -> str:
    """Why the default rubric caps the row: tests that passed on answers no tape holds."""
    if not made_up:
        return ""
    return (
        f"; {counted(len(made_up), 'test')} passed on a request no tape holds once re-worded "
        f"(first: {made_up[0].test}): passes nobody recorded"
    )


def _first_line(text: object) -> str:
    return str(text or "").split("\n", 1)[0]


def _install_findings(ctx: Context) -> list[Finding]:
    """The requirement lines the grader did not pass to the installer: the suite ran without them.

    On this check because the suite's run is what they change: refused installer options, paths and
    URLs (rule ``refused-requirement``), lines that are not requirements (``invalid-requirement``) and a
    grader tool whose pin replaced the submission's specifier (``pinned-tool``).
    """
    deps = ctx.dependencies
    if deps is None:
        return []
    return [
        Finding(rule=rule, message=f"{problem.why}: {problem.text!r}", location=problem.location)
        for rule, problems in (
            ("refused-requirement", deps.refused),
            ("invalid-requirement", deps.invalid),
            ("pinned-tool", deps.overridden),
        )
        for problem in problems
    ]


_LOOKS_FINE = ("passed", "xpassed", "skipped", "xfailed")


@dataclass
class _Evidence:
    hooks: list[Hook] = field(default_factory=list)
    forged: list[str] = field(default_factory=list)  # what was forged, one line each
    hidden: list[str] = field(default_factory=list)  # skipped/xfailed tests that fail when run
    left_out: list[str] = field(default_factory=list)  # tests the suite's command left out that fail
    left_out_because: str = ""
    skips: list[str] = field(default_factory=list)  # "nodeid (reason)" of skipped and not-run tests
    wrapped: list[str] = field(default_factory=list)  # test functions the submission's code replaced
    abnormal: bool = False
    abnormal_why: str = ""

    def summary(self) -> str:
        parts: list[str] = []
        if self.forged:
            kinds = [h for h in self.hooks if h.kind.startswith("pytest_") or h.kind == "startup"]
            where = ", ".join(h.location for h in kinds)[:160]
            parts.append(f"FORGED: {self.forged[0]}" + (f" (hooks at {where})" if where else ""))
        if self.hidden:
            parts.append(
                f"{len(self.hidden)} skipped/xfailed tests fail when run: {', '.join(self.hidden[:3])}"
            )
        elif self.skips:
            parts.append(f"{len(self.skips)} skipped: {', '.join(self.skips[:3])}")
        if self.left_out:
            noun = "test" if len(self.left_out) == 1 else "tests"
            parts.append(
                f"{len(self.left_out)} {noun} left out of the suite's command fail when run: "
                f"{', '.join(self.left_out[:3])} ({self.left_out_because})"
            )
        if self.abnormal:
            parts.append(self.abnormal_why)
        if self.hooks and not self.forged:
            parts.append(f"{len(self.hooks)} tamper hooks: {self.hooks[0]}")
        if self.wrapped and not self.forged:
            parts.append(f"{len(self.wrapped)} test functions wrapped by the suite's code: {self.wrapped[0]}")
        return "".join(f"; {p}" for p in parts)

    def details(self) -> list[str]:
        out = [f"forged: {line}" for line in self.forged[:_MAX_DETAILS]]
        out += [f"hidden failure: {line}" for line in self.hidden[:_MAX_DETAILS]]
        out += [f"left out and failing: {line}" for line in self.left_out[:_MAX_DETAILS]]
        out += [f"skipped: {line}" for line in self.skips[:_MAX_DETAILS]]
        out += [f"wrapped: {line}" for line in self.wrapped[:_MAX_DETAILS]]
        out += [f"tamper hook: {hook}" for hook in self.hooks[:_MAX_DETAILS]]
        if self.abnormal:
            out.append(self.abnormal_why)
        return out


def suite_passed(rr: ReplayRun) -> bool:
    """The grader's verdict on the replay run, not the suite's exit status: every test it ran passed, none
    failed when the grader re-ran it (without conftest, unskipped, in a clean interpreter), nothing forged,
    and the session finished in time. Any row that credits "the tests pass" uses this."""
    results = rr.results or Results()
    if rr.run.returncode != 0 or rr.run.timed_out or results.failed or results.errors or not results.passed:
        return False
    evidence = _tamper_evidence(rr, results)
    return not (evidence.forged or evidence.hidden or evidence.left_out or evidence.abnormal)


def _tamper_evidence(rr: ReplayRun, results: Results) -> _Evidence:
    """Compare the run with what the guard saw and with the verifying reruns (see Context.replay_run)."""
    ev = _Evidence(hooks=list(rr.scan.hooks) if rr.scan else [])
    guard = rr.guard
    if guard is not None:
        ev.forged += guard.rewritten
        ev.skips = [f"{nodeid} ({reason})" for nodeid, reason in guard.skipped.items()]
        ev.skips += [f"{nodeid} (xfail run=False)" for nodeid in guard.notrun]
    if rr.log_mismatch:
        ev.forged.append(rr.log_mismatch)
    # A check that failed after its test's call ended was never pytest's to report: no exit status lies.
    red = results.failed + results.errors - (len(guard.before_late) if guard is not None else 0)
    if red > 0 and not rr.run.timed_out:
        # A run whose own outcomes hold failures but that reports success (`pytest || true`, a session hook
        # forcing the exit status) tells CI it passed: that is a forged result, not an honest red run.
        noun = "failure" if red == 1 else "failures"
        if rr.run.returncode == 0:
            ev.forged.append(f"`{' '.join(rr.command)}` exited 0 with {red} {noun} recorded")
        elif guard is not None and guard.exitstatus == 0:
            ev.forged.append(f"pytest's session reported exit status 0 with {red} {noun} recorded")
    if guard is not None:
        ev.wrapped = list(guard.wrapped)
    without = "no conftest files, no plugins of its configuration"
    for rerun, how in (
        (rr.noconftest, without),
        (rr.hookless, f"{without}, nor the Makefile, in a clean interpreter"),
        (rr.unhooked, "their fixtures kept, their hooks taken away before the call"),
    ):
        if guard is None or rerun is None or rerun.guard is None:
            continue
        # Only "failed": a test that needs a conftest fixture errors without it, honestly.
        again = rerun.guard.outcomes
        for nodeid, outcome in guard.outcomes.items():
            if outcome in ("passed", "skipped", "xfailed") and again.get(nodeid) == "failed":
                line = f"{nodeid}: {outcome} with the suite's hooks, failed without them ({how})"
                if line not in ev.forged and not any(x.startswith(f"{nodeid}: ") for x in ev.forged):
                    ev.forged.append(line)
    if guard is not None and rr.clean is not None and rr.clean.guard is not None:
        # The suite's start-up files (sitecustomize.py) could run before the guard; the clean interpreter
        # never imports them (docs/security.md).
        again = rr.clean.guard.outcomes
        for nodeid, outcome in guard.outcomes.items():
            if outcome in ("passed", "xpassed", "skipped", "xfailed") and again.get(nodeid) in (
                "failed",
                "error",
            ):
                ev.forged.append(f"{nodeid}: {outcome} in the suite's run, failed in a clean interpreter")
    # A verifying rerun that cannot finish where the suite's own run did (red-team F15): the suite behaves
    # differently without its hooks, or outside the Makefile, and the difference is what hides its outcome.
    reruns = (
        (rr.noconftest, "without the submission's hooks"),
        (rr.hookless, "without its hooks, in a clean interpreter"),
        (rr.unhooked, "without its hooks (its fixtures kept)"),
        (rr.clean, "in a clean interpreter"),
    )
    for rerun, how in reruns if not rr.run.timed_out else ():
        if rerun is not None and rerun.run.timed_out:
            ev.forged.append(f"the suite's run finished, the rerun {how} timed out: it behaves differently")
    unskipped = rr.unskipped
    if guard is not None and unskipped is not None:
        again = unskipped.guard.outcomes if unskipped.guard is not None else {}
        messages = unskipped.guard.messages if unskipped.guard is not None else {}
        for nodeid, outcome in guard.outcomes.items():
            if outcome not in ("skipped", "xfailed"):
                continue
            if again.get(nodeid) in ("failed", "error"):
                ev.hidden.append(f"{nodeid} ({messages.get(nodeid, 'fails')})")
            elif unskipped.run.timed_out and nodeid not in again:
                # Red-team F15b: a skipped test that never finishes when run would have hung the suite.
                ev.hidden.append(f"{nodeid} (did not finish when run: the rerun timed out)")
    if guard is not None and rr.whole is not None and not rr.run.timed_out:
        # An optimized run's passes are no evidence: any test it ran that fails in the whole run counts.
        changed = {n.split("::", 1)[0] for n in guard.outcomes} if rr.optimized else set(rr.changed_tests)
        left_out = _left_out(guard, rr.whole, rr.run.duration, sorted(changed))
        for copied, submitted in rr.renamed.items():  # the copy's names back to the submission's
            left_out = [line.replace(copied, submitted) for line in left_out]
        ev.left_out, ev.left_out_because = left_out, rr.left_out_because
    if not rr.run.timed_out:
        if guard is None and results.records:
            ev.abnormal, ev.abnormal_why = (
                True,
                "the grader's guard plugin never ran (switched off by the suite?)",
            )
        elif guard is not None and guard.exitstatus is None:
            ev.abnormal = True
            ev.abnormal_why = (
                f"pytest's session never finished (exit {rr.run.returncode}): the process ended mid-run"
            )
        elif guard is not None and (unrun := _never_ran(guard)):
            ev.abnormal = True
            ev.abnormal_why = (
                f"pytest's session ended (status {guard.exitstatus}) before {unrun} of its {guard.collected} "
                "collected tests ran, and none had failed: a `pytest.exit()` or an interrupt hid the rest"
            )
    return ev


def _never_ran(guard: GuardLog) -> int:
    """Collected tests the finished session never ran, when nothing had failed by then (red team 12: a test
    calling ``pytest.exit(returncode=0)`` ended a green session before the failing tests after it). A suite
    that stopped at its first failure (``-x``) shows that failure: not counted here."""
    if guard.collected is None or any(o in ("failed", "error") for o in guard.outcomes.values()):
        return 0
    return max(0, guard.collected - len(guard.outcomes) - len(set(guard.notrun) - set(guard.outcomes)))


_NEEDS_NETWORK = re.compile(
    r"SocketBlocked|socket|ConnectError|ConnectionError|ConnectTimeout|getaddrinfo|Name or service not known|"
    r"Temporary failure in name resolution|Network is unreachable|Connection refused|APIConnectionError",
    re.IGNORECASE,
)


def _left_out(
    guard: GuardLog, whole: ReplayRun, own_duration: float, changed: Sequence[str] = ()
) -> list[str]:
    """Tests the whole-suite run failed that the suite's own run never ran (red-team F10), or ran from a
    test file the run itself had rewritten (red team 4, F8b: the same id, another test).

    The same test may be named from another root when the recipe changes folder first (``cd tests &&
    pytest``): a node id that ends the other's path counts as the same test.
    """
    ran = set(guard.outcomes)
    tails = {nodeid.rsplit("/", 1)[-1] for nodeid in ran}
    out: list[str] = []
    again = whole.guard
    if again is None:
        return out
    # A left-out test that needs the network (a live test its `-m "not live"` deselects) fails offline for
    # that reason alone: not counted when the run did try to connect and the failure says so.
    connected = bool(whole.audit.network_attempts or whole.blocked)
    rewritten = set(changed)
    for nodeid, outcome in again.outcomes.items():
        if outcome not in ("failed", "error"):
            continue
        if nodeid in ran and nodeid.split("::", 1)[0] not in rewritten:
            continue
        tail = nodeid.rsplit("/", 1)[-1]
        if (
            nodeid not in ran
            and tail in tails
            and any(a.endswith("/" + nodeid) or nodeid.endswith("/" + a) for a in ran)
        ):
            continue
        if nodeid in ran and guard.outcomes.get(nodeid) in ("failed", "error"):
            continue  # failed in the suite's own run too: counted there
        message = again.messages.get(nodeid, outcome)
        if connected and _NEEDS_NETWORK.search(message):
            continue
        out.append(f"{nodeid} ({message})")
    if whole.run.timed_out and own_duration < whole.run.duration / 2:
        # The suite's own tests took under half the time: what never finished is what it left out.
        out.append("tests left out of the suite's command did not finish when run (the run timed out)")
    return out


def _attempts(rr: ReplayRun, results: Results) -> list[tuple[str, str]]:
    """(file:line, what) per distinct attempt: the audit hook's events, then pytest-socket's refusals
    (which happen before a socket exists, so the hook never sees them)."""
    out: dict[tuple[str, str], None] = {}
    refused_at = set()
    for event in rr.audit.network_attempts:
        what = f"{event.event} {event.target}".strip()
        out.setdefault((event.where or "?", what), None)
        if event.event == "socket.refused":
            refused_at.add(event.where)
    for where, what in rr.blocked:
        if where not in refused_at:  # the same refusal, already seen as it happened
            out.setdefault((where, what), None)
    if not rr.blocked:
        # No JUnit file (the run was killed before pytest wrote it): the result log still names the tests.
        for line in results.first_failures:
            if "SocketBlockedError" in line:
                out.setdefault((line.split(" (", 1)[0], "socket refused by pytest-socket"), None)
    if not out and rr.run.no_route:
        # Red team 6, H4 (as G6 for loud-miss's runs): a test that asks the network through `curl` or a
        # Python outside the venv is seen by neither the hook nor pytest-socket, but by the run's namespace.
        what = (
            f"{counted(rr.run.no_route, 'packet')} toward the network from a process the audit hook does not "
            "see (not Python: curl, wget, a shell)"
        )
        out[("(the suite's run)", what)] = None
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
