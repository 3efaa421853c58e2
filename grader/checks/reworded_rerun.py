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

Red team 4, F3: a client can also tell every tape-withholding probe from the real run by the tape folder
(all the tapes its chain lists are there only in the real run) and invent answers only then. So the same
re-worded inputs are run once more with every tape in place, a copy that differs from the submission only
in the re-worded messages. A test whose miss named another key once its inputs were re-worded (so its
request changed, and no committed tape holds the new key) must fail naming a miss there too; one that
passes answered a request no tape holds while every tape was there.

Red team 6, H1: a cassette that, for a key it lacks, serves the tape recorded for the same ticket text keeps
every probe above loud (each changes the ticket). So the same pair of runs is made once more with only the
recorded system prompts re-worded (``prompt=True``: each prompt, each of its lines and sentences, wherever
the repository's text files hold it), the user messages untouched: the tapes-withheld run shows which tests'
requests changed (their miss names a key no tape holds), and with every tape in place those must miss
again. A key that leaves the system prompt out names the same key in both withheld runs: not compared
here (the canonical-keys row's system-prompt probes see that key).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from grader.drift_run import find_tickets
from grader.reword import Rewording, plan, reword_copy
from grader.standin import system_prompts
from grader.tapes import tapes_of

if TYPE_CHECKING:
    from grader.context import Context, ReplayRun

__all__ = [
    "Answered",
    "Prepared",
    "answered",
    "answered_in_place",
    "prepare",
    "prepare_in_place",
]

# The label of the run in the grader's own logs; no run sees it (Context.log_path), and its copy's path,
# environment and command are those of the plain withheld-tape rerun.
LABEL = "withheld-tapes-reworded"
IN_PLACE_LABEL = "replay-reworded"
PROMPT_LABEL = "withheld-tapes-prompt-reworded"
PROMPT_IN_PLACE_LABEL = "replay-prompt-reworded"
_MAX_MESSAGES = 500  # recorded messages re-worded at most (each is one alternative of one search)
_SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+")
_LOCATION = re.compile(r"^(?P<where>[^\s:]+:\d+): ")
# What names the request a miss was for: a key of 16+ hex characters (as the loud-miss row's "names a
# tape" reads it), not an address (0x...) nor inside a path's folders (a scratch copy's random name).
_KEY = re.compile(r"(?<![0-9A-Za-z])(?<!0x)[0-9a-f]{16,64}(?![0-9A-Za-z])")
_FOLDERS = re.compile(r"\S*[/\\]")


@dataclass(frozen=True)
class Answered:
    """A test that answered a never-recorded request: its id, where it is (``file:line`` when the withheld
    run's failure said), and what it did with the re-worded inputs."""

    test: str
    where: str
    how: str
    inputs: str = "its recorded messages"  # what was re-worded, as evidence says it


@dataclass
class Prepared:
    """The re-worded copy: recorded messages eligible, what was rewritten, and the run (None: no recorded
    message occurs in any text file, so there is nothing to run)."""

    messages: int
    rewording: Rewording
    run: Callable[[], ReplayRun] | None
    failed: str = ""  # why the copy could not be re-worded (then no run: a half re-worded copy misleads)


def prepare(
    ctx: Context, cassette_dir: Path, is_tape: Callable[[Path], bool], *, prompt: bool = False
) -> Prepared:
    """A scratch copy with the tapes withheld and the recorded messages (``prompt``: system prompts)
    re-worded, ready to run."""
    return _prepare(ctx, cassette_dir, PROMPT_LABEL if prompt else LABEL, is_tape, prompt)


def prepare_in_place(ctx: Context, cassette_dir: Path, *, prompt: bool = False) -> Prepared:
    """A scratch copy with every tape in place and the recorded messages (``prompt``: system prompts)
    re-worded as in `prepare` (the same words: the requests this run sends are those the withheld run's
    misses named), ready to run."""
    return _prepare(ctx, cassette_dir, PROMPT_IN_PLACE_LABEL if prompt else IN_PLACE_LABEL, None, prompt)


def _prompt_plan(ctx: Context) -> dict[str, str]:
    """Each recorded system prompt, each of its lines and each of its sentences -> its re-wording.

    Sentences too, because code seldom holds a long prompt in one piece: a formatter splits it into string
    literals joined across lines, so only a piece of it (a sentence) is written down anywhere. One piece
    re-worded is enough: the prompt sent is no longer the recorded one. A piece that is also a recorded user
    message is left alone, so the tickets reach the cassette as they were recorded."""
    prompts: dict[str, None] = {}
    for tape in sorted(tapes_of(ctx), key=lambda t: t.path):
        for inter in tape.interactions:
            for prompt in system_prompts(inter.request_body):
                prompts[prompt] = None
                prompts.update(dict.fromkeys(s.strip() for s in _SENTENCE_END.split(prompt)))
        if len(prompts) >= _MAX_MESSAGES:
            break
    tickets = {t.message for t in find_tickets(ctx)}
    return {old: new for old, new in plan(prompts).items() if old not in tickets}


def _prepare(
    ctx: Context, cassette_dir: Path, label: str, is_tape: Callable[[Path], bool] | None, prompt: bool
) -> Prepared:
    if prompt:
        mapping = ctx.memo("reworded-prompts", lambda: _prompt_plan(ctx))
    else:
        mapping = ctx.memo(
            "reworded-messages", lambda: plan(t.message for t in find_tickets(ctx, limit=_MAX_MESSAGES))
        )
    if not mapping:
        return Prepared(0, Rewording(), None)
    if is_tape is None:
        copy = ctx.scratch_copy(label)
    else:
        copy, _ = ctx.scratch_copy_without(label, cassette_dir, is_tape)
    try:
        rewording = reword_copy(ctx.repo, copy, mapping, leave=cassette_dir)
    except OSError as exc:
        return Prepared(len(mapping), Rewording(), None, f"the copy could not be re-worded ({exc.strerror})")
    if not rewording.occurrences:
        return Prepared(len(mapping), rewording, None)
    return Prepared(len(mapping), rewording, lambda: ctx.run_suite(copy, label=label))


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


def _verdict(
    test: str, missed: str, result: str | None, says: str, names_miss: Callable[[str], bool]
) -> Answered | None:
    """A test that failed with ``missed`` (a miss) in one run and ended ``result`` saying ``says`` in the
    re-worded one: an Answered when it passed, or failed on something else without naming a miss."""
    located = _LOCATION.match(missed)
    where = located.group("where") if located else test.split("::", 1)[0]
    if result in ("passed", "xpassed"):
        return Answered(test, where, "passed")
    if result in ("failed", "error") and not names_miss(_message(says)) and _kind(says) != _kind(missed):
        said = _message(says).strip() or "no message"
        return Answered(test, where, f"{result} without naming a miss ({said[:160]})")
    return None


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
        verdict = _verdict(test, why.get(test, ""), now.get(test), says.get(test, ""), names_miss)
        if verdict is not None:
            found.append(verdict)
    found.sort(key=lambda item: item.how != "passed")  # a pass on a made-up answer is the plainest
    return compared, found


def _keys(line: str) -> frozenset[str]:
    """The keys a failure's first line names (a path counts by its last part only)."""
    return frozenset(_KEY.findall(_FOLDERS.sub("", _message(line))))


def answered_in_place(
    withheld: ReplayRun,
    reworded: ReplayRun,
    in_place: ReplayRun,
    names_miss: Callable[[str], bool],
    recorded: Callable[[str], bool],
) -> tuple[int, list[Answered]] | None:
    """(tests compared, those that answered without a miss) in the re-worded run with every tape in place.

    Compared: a test that failed naming a miss in both withheld runs, where the re-worded run's miss named
    keys the plain one did not and no committed tape holds (``recorded(key)`` false for each): its request
    changed with its inputs and nothing recorded answers it. With the tapes in place it must fail naming a
    miss again. A test whose miss named no key, or the same keys, is not compared (its request may not have
    changed: a pass with the tapes in place would be its tape's). None without per-test outcomes."""
    runs = [_outcomes(withheld), _outcomes(reworded), _outcomes(in_place)]
    if any(r is None for r in runs):
        return None
    (was, why), (then, said), (now, says) = cast("list[tuple[dict[str, str], dict[str, str]]]", runs)
    compared = 0
    found = []
    for test, outcome in was.items():
        before, after = why.get(test, ""), said.get(test, "")
        if outcome not in ("failed", "error") or then.get(test) not in ("failed", "error"):
            continue
        if not (names_miss(_message(before)) and names_miss(_message(after))):
            continue
        new_keys = _keys(after) - _keys(before)
        if not new_keys or any(recorded(key) for key in new_keys):
            continue
        compared += 1
        verdict = _verdict(test, after, now.get(test), says.get(test, ""), names_miss)
        if verdict is not None:
            found.append(verdict)
    found.sort(key=lambda item: item.how != "passed")
    return compared, found
