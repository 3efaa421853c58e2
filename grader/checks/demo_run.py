"""`make demo` as the grader runs it once per grade: make-targets judges it, loud-miss reads its audit."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.audit import AuditLog
    from grader.context import Context
    from grader.sandbox import RunResult

__all__ = ["demo_run"]


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
