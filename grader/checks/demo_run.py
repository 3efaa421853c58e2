"""`make demo` as the grader runs it once per grade: make-targets judges it, loud-miss reads its audit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from grader.context import makefile_target_lines
from grader.errors import NotAssessable
from grader.perturb import AnswerSchema, answer_schema
from grader.tapes import Tape, tapes_of

if TYPE_CHECKING:
    from grader.audit import AuditLog
    from grader.context import Context
    from grader.sandbox import RunResult

__all__ = ["RewrittenDemo", "demo_run", "demo_with_tapes_rewritten"]

_T = TypeVar("_T")


@dataclass
class RewrittenDemo(Generic[_T]):
    """`make demo` in the checkout and in a copy whose tapes were rewritten."""

    where: str  # the Makefile's `demo` rule (file:line)
    tapes: list[Tape]  # the readable tapes, as submitted
    schema: AnswerSchema
    real: RunResult  # the demo's own run (exit 0)
    run: RunResult  # the demo on the rewritten tapes
    rewritten: _T  # what the rewrite said it changed


def demo_run(ctx: Context) -> tuple[RunResult, AuditLog]:
    """`make demo` in the checkout, offline, no credentials; made once however many checks ask."""
    return ctx.memo(
        "make demo",
        lambda: ctx.run(
            ["make", "demo"],
            env={"CASSETTE_MISS_LOG": str(ctx.log_path("demo", ".misses.jsonl"))},
            label="make demo",
        ),
    )


def demo_with_tapes_rewritten(
    ctx: Context, label: str, rewrite: Callable[[Sequence[Tape], Path], _T], shown: str
) -> RewrittenDemo[_T] | None:
    """`make demo` once more, offline, in a scratch copy whose tapes ``rewrite`` changed (``shown``: what the
    run is called in the logs). None when there is nothing to compare: no demo target, no environment, no
    answer in the tapes, the demo's own run failed (make-targets and loud-miss judge that), nothing
    rewritten, or the grade's time is spent."""
    where = makefile_target_lines(ctx.repo).get("demo")
    if where is None or ctx.env is None or ctx.manifest.cassette_dir is None:
        return None
    tapes = [t for t in tapes_of(ctx) if t.format != "invalid" and t.text]
    schema = answer_schema(tapes)
    if schema is None:
        return None
    try:
        real, _ = demo_run(ctx)
        if real.returncode != 0 or real.timed_out:
            return None
        copy = ctx.scratch_copy(label)
        rewritten = rewrite(tapes, copy)
        if not rewritten:
            return None
        run, _ = ctx.run(
            ["make", "demo"],
            cwd=copy,
            env={"CASSETTE_MISS_LOG": str(ctx.log_path(label, ".misses.jsonl"))},
            label=f"make demo ({shown})",
        )
    except NotAssessable:
        return None
    return RewrittenDemo(where, tapes, schema, real, run, rewritten)
