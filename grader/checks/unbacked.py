"""Tests whose pass rests on an answer no recording gave: counted as failures by the rows that read the
suite's verdict.

Red team 23, F1: an edited tape capped offline-replay at 2, but the honest twin whose three tests fail on
the real recording scored 1 there, and make-targets still said "test passed" on the edited tape. So a pass
the grader has found unbacked (on a tape edited by hand in a later commit, on a re-worded request no tape
holds, on an answer the agent took from elsewhere or the client was handed from a table) counts as the
failure it would have been: the same score as the twin, never above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.checks import answer_rerun
from grader.checks.loud_miss import made_up_passes
from grader.checks.served_answers import served_answers
from grader.errors import NotAssessable
from grader.tape_history import TapeHistory, tape_edits

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["edit_history", "unbacked_passes"]

_PASSED = ("passed", "xpassed")


def edit_history(ctx: Context) -> TapeHistory:
    """The tapes' hand edits (read from git once per grade)."""
    return ctx.memo("tape edits", lambda: tape_edits(ctx.repo, ctx.manifest.cassette_dir))


def unbacked_passes(ctx: Context) -> list[str]:
    """The tests (one name each; a tape read outside any test stands for one) that passed on an answer no
    recording gave, as the replay check's probes found them."""
    return ctx.memo("unbacked passes", lambda: _unbacked(ctx))


def _unbacked(ctx: Context) -> list[str]:
    found: dict[str, None] = {}
    # Only edits of the answer itself: a bumped id or timestamp fails no test of the honest recording.
    edited = {edit.path for edit in edit_history(ctx).edits if edit.answer_changed}
    if edited:
        try:
            rr = ctx.replay_run()
        except NotAssessable:
            rr = None
        outcomes = rr.guard.outcomes if rr is not None and rr.guard is not None else {}
        opened = rr.audit.opened_by if rr is not None else {}
        for test, paths in opened.items():
            if test and edited & set(paths) and outcomes.get(test) in _PASSED:
                found[test] = None
        # An edited tape no one test was seen to read (read at import, or not at all) stands for one pass.
        for path in sorted(edited - {p for t, ps in opened.items() if t for p in ps}):
            found[f"a test reading {path}"] = None
    for item in made_up_passes(ctx):
        found[item.test] = None
    probe = answer_rerun.answer_probe(ctx)
    for ignored in probe.ignored if probe is not None else []:
        found[answer_rerun.who(ignored)] = None
    served = served_answers(ctx)
    for replaced in served.replaced if served is not None else []:
        found[replaced.test or "a request made outside any test"] = None
    return list(found)
