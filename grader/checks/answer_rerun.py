"""The replay check's perturbed-answer rerun: does the suite pass on what the tapes hold, or on answers of
its own?

Red team 15, F1: a cassette layer that on a hit swaps the recorded answer for one from a table of its own
(``errata.json`` keyed by tape key) passes every check that reads the tape files, and its suite passes on
an answer no model gave. So the suite runs once more in a copy whose tapes answer otherwise: each recorded
answer object given another label and its yes/no field flipped, requests and keys untouched
(grader/perturb.py). A test that read such a tape (the audit hook files each open under the test that
made it) and failed now depended on the tape's answer: fine. One that passed both times either checks
little (``intent in LABELS``) or never saw the tape's answer. To tell the two apart, the triage command
runs offline on each such test's recorded ticket, in two more copies whose tapes hold two different other
labels: printing what the tape holds, it replays the tape (the test is only weak: not a finding);
printing another, it answers that ticket from somewhere else, counted in ``answers_ignored``.

Red team 18: an agent that swaps the label it parsed only when its conftest switched that on passes its
suite and answers the plain triage command from the tape. So a ``python -m <pkg>`` command is asked from a
test file added to the suite (grader/checks/ask_in_suite.py), with the suite's conftest in force.

Red team 16, F1: a layer that reads every tape at import (or all of them on first use) leaves the audit
no test to file the reads under. Tapes read while no test ran, or by a test that read the tapes of more
than one ticket, are "unsure": when some test passed both times, their tickets are asked about too (at
most 30 tickets in all, chosen at random past that).

Not caught: a layer that reads the tape's answer and then overrides it only inside the suite's process
(the triage command then shows the tape's answer); an agent whose ticket is not the recorded request's
last user message (the command then misses, which says nothing either way); tapes whose answers are
streamed in pieces or compressed (not perturbed).
"""

from __future__ import annotations

import random as _random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from grader.checks.ask_in_suite import ask
from grader.context import for_want_of_room
from grader.details import counted
from grader.drift_run import printed_objects, triage_command
from grader.errors import NotAssessable
from grader.perturb import Perturbed, perturb_copy
from grader.tapes import tapes_of

if TYPE_CHECKING:
    from grader.context import Context, ReplayRun

__all__ = ["AnswerProbe", "Ignored", "answer_probe", "details", "start_answer_probe", "summary", "who"]

LABEL = "answers-perturbed"
_MAX_TICKETS = 30  # tickets asked about at most (two interpreter starts each)
_UNSURE = ""  # stands for the tests whose tapes the audit could not tell apart
_PASSED = ("passed", "xpassed")


@dataclass(frozen=True)
class Ignored:
    """A test that passed with its tape answering otherwise, and the triage command's answer on its
    ticket, which was not the tape's."""

    test: str
    tape: str
    was: str
    now: str
    answered: str


@dataclass
class AnswerProbe:
    perturbed: int = 0  # recorded answers given another label
    compared: int = 0  # tests that passed in the suite's run and read a perturbed tape
    changed: int = 0  # of those, tests that no longer passed
    ignored: list[Ignored] = field(default_factory=list)
    # Tests that passed again with their tapes' answers changed and were not found answered otherwise: they
    # check little, or take the answer from a path the triage command does not (red team 21, F3). Listed.
    kept: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def start_answer_probe(ctx: Context) -> None:
    """Make the copy and run the suite in it in the background, alongside the replay suite."""
    if ctx.env is None or ctx.manifest.cassette_dir is None:
        return
    ctx.start_probe(LABEL, lambda: _perturbed_run(ctx))


def _perturbed_run(ctx: Context) -> tuple[list[Perturbed], ReplayRun | None]:
    copy = ctx.scratch_copy(LABEL)
    perturbed = perturb_copy(tapes_of(ctx), copy)
    if not perturbed:
        return perturbed, None
    return perturbed, ctx.run_suite(copy, label=LABEL)


def answer_probe(ctx: Context) -> AnswerProbe | None:
    """The comparison, made once per grade; None when it could not be made (no environment, no cassette
    folder, the budget spent, no per-test outcomes)."""
    return ctx.memo("answer probe", lambda: _answer_probe(ctx))


def _answer_probe(ctx: Context) -> AnswerProbe | None:
    if ctx.env is None or ctx.manifest.cassette_dir is None:
        return None
    try:
        started = cast("tuple[list[Perturbed], ReplayRun | None] | None", ctx.probe_result(LABEL))
        perturbed, rerun = started if started is not None else _perturbed_run(ctx)
        primary = ctx.replay_run()
    except NotAssessable as exc:
        if for_want_of_room(exc.reason):
            # Not made for a full disk (red team 30): the replay row waits for the room (it is run again)
            # rather than capped for a skip the submission did not cause.
            raise
        return None
    probe = AnswerProbe(perturbed=len(perturbed))
    if rerun is None or primary.guard is None:
        return probe if rerun is None else None
    if rerun.guard is None:
        # The suite never got to its tests with the tapes changed (a layer that checks its tapes and
        # refuses changed ones at start-up): it depends on them, as an honest suite does.
        probe.notes.append("with the tapes' answers changed the suite reported no test (it refused them?)")
        return probe
    by_tape: dict[str, list[Perturbed]] = {}
    for item in perturbed:
        by_tape.setdefault(item.tape.rsplit(":", 1)[0], []).append(item)
    weak: dict[str, list[Perturbed]] = {}
    for test, outcome in primary.guard.outcomes.items():
        read = sorted(set(rerun.audit.opened_by.get(test, ())) & set(by_tape))
        if outcome not in _PASSED or not read:
            continue
        probe.compared += 1
        if rerun.guard.outcomes.get(test) not in _PASSED:
            probe.changed += 1
            continue
        weak[test] = [item for tape in read for item in by_tape[tape]]
    unsure = _unattributed(rerun, by_tape)
    if unsure and any(
        outcome in _PASSED and rerun.guard.outcomes.get(test) in _PASSED and test not in weak
        for test, outcome in primary.guard.outcomes.items()
    ):
        # Some test passed both times having read no tape of its own that the audit could name, while tapes
        # were read where no one test can be told from another: it may have been answered from those.
        weak[_UNSURE] = [item for tape in sorted(unsure) for item in by_tape[tape]]
        probe.notes.append(
            f"{len(unsure)} perturbed tapes were read outside any one test (at import, or all at once by one "
            "test): their tickets were asked about too"
        )
    if weak:
        _ask_the_agent(ctx, weak, probe)
        found = {item.test for item in probe.ignored}
        probe.kept = sorted(t for t in weak if t != _UNSURE and t not in found)
    return probe


def _unattributed(rerun: ReplayRun, by_tape: dict[str, list[Perturbed]]) -> set[str]:
    """Perturbed tapes whose reader the audit cannot name (red team 16, F1): read while no test ran (a
    layer that loads every tape at import), or by a test that read the tapes of more than one ticket (a
    layer that loads them all on first use files every read under the first test)."""
    tapes = set(by_tape)
    unsure = set(rerun.audit.opened_by.get("", ())) & tapes
    for test, paths in rerun.audit.opened_by.items():
        read = set(paths) & tapes
        if test and len({item.message for tape in read for item in by_tape[tape]}) > 1:
            unsure |= read
    return unsure


def _ask_the_agent(ctx: Context, weak: dict[str, list[Perturbed]], probe: AnswerProbe) -> None:
    """Run the triage command on the tickets of the tests that passed both times; file those whose ticket
    was answered with an intent the tape does not hold."""
    command = triage_command(ctx)
    if not command:
        probe.notes.append(
            f"{len(weak)} tests passed with their tapes answering otherwise; no triage command to ask"
        )
        return
    tickets = list(dict.fromkeys(item.message for items in weak.values() for item in items if item.message))
    if len(tickets) > _MAX_TICKETS:
        # Which ones, the submission cannot know in advance.
        probe.notes.append(f"{_MAX_TICKETS} of {len(tickets)} tickets were asked about, chosen at random")
        tickets = _random.SystemRandom().sample(tickets, _MAX_TICKETS)
    wanted = set(tickets)
    # Two copies, each answer given a different other label in each: a table of the layer's own could
    # happen to say what one copy's tape says, not what both say.
    for shift in (1, 2):
        copy = ctx.scratch_copy(f"{LABEL}-triage-{shift}")
        now = perturb_copy(tapes_of(ctx), copy, shift=shift)
        # What any tape now holds for the ticket: the same request may be recorded in several tapes (a
        # demo's tape and a test's), each answered differently when recorded.
        held: dict[str, set[str]] = {}
        for item in now:
            held.setdefault(item.message, set()).add(item.now)
        answers: dict[str, str] = {}
        for message in tickets:
            # Asked from the module of a test that read the ticket: its fixtures are in force too.
            readers = (t for t, items in weak.items() if any(i.message == message for i in items))
            beside = next((t for t in readers if t != _UNSURE), "")
            try:
                run, code = ask(ctx, copy, command, message, {"CASSETTE_MODE": "replay"}, LABEL, beside)
            except NotAssessable:
                return
            answer = next((a for a in printed_objects(run.stdout) if isinstance(a.get("intent"), str)), None)
            if code == 0 and answer is not None:
                answers[message] = str(answer["intent"])
        flagged = {(found.test, found.tape) for found in probe.ignored}
        for test, items in weak.items():
            for item in items:
                said = answers.get(item.message)
                if item.message not in wanted or said is None or said in held.get(item.message, set()):
                    continue
                if (test, item.tape) in flagged or (test != _UNSURE and any(t == test for t, _ in flagged)):
                    continue
                shown = next((x.now for x in now if x.message == item.message), item.now)
                probe.ignored.append(Ignored(test, item.tape, item.was, shown, said))
                flagged.add((test, item.tape))


def who(item: Ignored) -> str:
    """The test that passed on the answer, as evidence names it."""
    return item.test or "a test whose tapes were read outside it (at import, or all at once)"


def summary(probe: AnswerProbe | None) -> str:
    """Why the default rubric caps the row: tests that passed on answers their tapes do not hold."""
    if probe is None or not probe.ignored:
        return ""
    first = probe.ignored[0]
    return (
        f"; {counted(len(probe.ignored), 'ticket')} answered other than its tape once every tape's answer "
        f"was changed, where a test passed (first: {who(first)}: {first.tape} now says {first.now!r}, the "
        f"triage command said {first.answered!r})"
    )


def details(probe: AnswerProbe | None, limit: int) -> Sequence[str]:
    if probe is None:
        return []
    out = [
        f"answer not from its tape: {who(item)} passed with {item.tape} answering {item.now!r} instead of "
        f"{item.was!r}; the triage command on that ticket printed {item.answered!r}"
        for item in probe.ignored[:limit]
    ]
    if probe.perturbed:
        out.append(
            f"answers perturbed: {probe.perturbed} recorded answers given another label; "
            f"{probe.compared} passing tests read them, {probe.changed} of them then failed"
        )
    if probe.kept:
        more = len(probe.kept) - 3
        shown = ", ".join(probe.kept[:3]) + (f" and {more} more" if more > 0 else "")
        out.append(
            "passed again with their tapes' answers changed, the triage command not answering otherwise: "
            f"{shown}: they check little of the answer, or take it from a path the command does not take "
            "(not scored)"
        )
    return out + probe.notes
