"""The loud-miss check's re-worded rerun: the suite's own library calls on requests no tape ever held.

Red-team R5, R5b, R5c: a client can keep every probe that enters through an entry point the grader knows
loud (the recorded keys embedded, the caller's stack read, a flag its ``__main__`` sets) and invent answers
only for requests never recorded, which its own tests then pass on. This rerun withholds the tapes as the
withheld-tape rerun does and also re-words every recorded user message wherever the repository's text files
hold it (grader/reword.py), so the suite's own calls send requests nobody recorded. A test that failed
naming a miss with the tapes withheld must fail naming a miss again: one that now passes, or fails on
something else (an assertion about the answer it got), answered a never-recorded request without a miss.

Tests that pass with the tapes withheld (they never reach the cassette layer: a mocked client, a parser
test) are not compared, nor is a test whose withheld failure did not itself name a miss: the comparison
needs a miss it can watch disappear.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.drift_run import find_tickets
from grader.reword import Rewording, plan, reword_copy

if TYPE_CHECKING:
    from grader.context import Context, ReplayRun

__all__ = ["Answered", "Prepared", "answered", "prepare"]

# The label of the run in the grader's own logs; no run sees it (Context.log_path), and its copy's path,
# environment and command are those of the plain withheld-tape rerun.
LABEL = "withheld-tapes-reworded"
_MAX_MESSAGES = 500  # recorded messages re-worded at most (each is one alternative of one search)
_LOCATION = re.compile(r"^(?P<where>[^\s:]+:\d+): ")


@dataclass(frozen=True)
class Answered:
    """A test that answered a never-recorded request: its id, where it is (``file:line`` when the withheld
    run's failure said), and what it did with the re-worded inputs."""

    test: str
    where: str
    how: str


@dataclass
class Prepared:
    """The re-worded copy: recorded messages eligible, what was rewritten, and the run (None: no recorded
    message occurs in any text file, so there is nothing to run)."""

    messages: int
    rewording: Rewording
    run: Callable[[], ReplayRun] | None
    failed: str = ""  # why the copy could not be re-worded (then no run: a half re-worded copy misleads)


def prepare(ctx: Context, cassette_dir: Path, is_tape: Callable[[Path], bool]) -> Prepared:
    """A scratch copy with the tapes withheld and the recorded messages re-worded, ready to run."""
    mapping = plan(t.message for t in find_tickets(ctx, limit=_MAX_MESSAGES))
    if not mapping:
        return Prepared(0, Rewording(), None)
    copy, _ = ctx.scratch_copy_without(LABEL, cassette_dir, is_tape)
    try:
        rewording = reword_copy(ctx.repo, copy, mapping, leave=cassette_dir)
    except OSError as exc:
        return Prepared(len(mapping), Rewording(), None, f"the copy could not be re-worded ({exc.strerror})")
    if not rewording.occurrences:
        return Prepared(len(mapping), rewording, None)
    return Prepared(len(mapping), rewording, lambda: ctx.run_suite(copy, label=LABEL))


def _outcomes(rr: ReplayRun) -> tuple[dict[str, str], dict[str, str]] | None:
    """(test id -> outcome, test id -> first line of its failure) from the guard; None without its log."""
    if rr.guard is None:
        return None
    return rr.guard.outcomes, rr.guard.messages


def _message(line: str) -> str:
    """A guard failure line without its leading ``file:line: ``."""
    return _LOCATION.sub("", line, count=1)


def _kind(line: str) -> str:
    """What was raised (``CassetteMiss``, ``AssertionError``), from a failure's first line: the same kind as
    the withheld-tape failure is the same miss, whatever the cut at the line's cap left of its wording."""
    return _message(line).split(":", 1)[0].strip().rsplit(".", 1)[-1]


def answered(
    withheld: ReplayRun, reworded: ReplayRun, names_miss: Callable[[str], bool]
) -> tuple[int, list[Answered]] | None:
    """(tests compared: those that failed naming a miss with the tapes withheld, those of them that passed or
    failed on something else, not naming a miss, with the inputs re-worded); None when either run left no
    per-test outcomes (no guard log)."""
    before, after = _outcomes(withheld), _outcomes(reworded)
    if before is None or after is None:
        return None
    (was, why), (now, says) = before, after
    compared = 0
    found = []
    for test, outcome in was.items():
        if outcome not in ("failed", "error") or not names_miss(_message(why.get(test, ""))):
            continue
        compared += 1
        located = _LOCATION.match(why.get(test, ""))
        where = located.group("where") if located else test.split("::", 1)[0]
        result = now.get(test)
        if result in ("passed", "xpassed"):
            found.append(Answered(test, where, "passed"))
        elif (
            result in ("failed", "error")
            and not names_miss(_message(says.get(test, "")))
            and _kind(says.get(test, "")) != _kind(why.get(test, ""))
        ):
            said = _message(says.get(test, "")).strip() or "no message"
            found.append(Answered(test, where, f"{result} without naming a miss ({said[:160]})"))
    found.sort(key=lambda item: item.how != "passed")  # a pass on a made-up answer is the plainest
    return compared, found
