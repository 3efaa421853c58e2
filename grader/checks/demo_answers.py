"""The replay check's demo comparison: does `make demo` show what its tapes answer?

Every answer check asks the triage command one message at a time. A demo may go through another path of
the same program: red team 21, F3, a batch mode that applies a corrections table of its own after the
agent returned; red team 22, F2b, a demo that opens every tape and prints a saved table without calling the
agent. Both showed answers no model gave, while every single-message ask read the tape honestly.

So `make demo` runs once more, offline, in a copy whose tapes answer otherwise (grader/perturb.py: each
recorded answer given another label). An answer line of the demo's output (the label field written with
its value, as JSON or ``intent: billing``, or a ticket's text with a label before or after it) that is the
same, at the same place, as in the demo's own run was not read from a tape. Lines are compared only when
the demo's own run exited 0 and both printed as many answer lines (a demo that checks its answers against
the tickets' labels exits 1 with the tapes changed, having printed them all).

Not caught: a demo whose answer lines hold no ticket and no label field (a bare ``billing``), one that
checks its tapes against digests of its own and shows the table only while they are unchanged, and an
agent whose own rules override the model's label (an honest design that looks the same: the evidence
names the line for a reviewer, as the triage command's asks do).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.checks.demo_run import demo_with_tapes_rewritten
from grader.perturb import perturb_copy

if TYPE_CHECKING:
    from grader.context import Context
    from grader.perturb import AnswerSchema

__all__ = ["DemoAnswers", "answer_lines", "demo_answers"]

LABEL = "demo-perturbed"
_SHOWN = "answers changed"
_TICKET_PREFIX = 24  # characters of a ticket that identify it in a line of output
_MAX_LINE = 400  # characters of a line looked at (an answer line is short)


@dataclass
class DemoAnswers:
    where: str  # the Makefile's `demo` rule (file:line)
    compared: int = 0  # answer lines compared
    kept: list[str] = field(default_factory=list)  # answer lines the same with the tapes' answers changed
    note: str = ""


def demo_answers(ctx: Context) -> DemoAnswers | None:
    """The comparison, made once per grade; None when there is nothing to compare (no demo target, no
    environment, no tape answer to change, the demo's own run failed)."""
    return ctx.memo("demo answers", lambda: _demo_answers(ctx))


def _demo_answers(ctx: Context) -> DemoAnswers | None:
    demo = demo_with_tapes_rewritten(ctx, LABEL, lambda tapes, to: perturb_copy(tapes, to, shift=1), _SHOWN)
    if demo is None:
        return None
    real, run, schema, perturbed, where = demo.real, demo.run, demo.schema, demo.rewritten, demo.where
    found = DemoAnswers(where)
    # A demo that checks its answers against the tickets' labels fails here, having printed them all.
    failed = run.returncode != 0 or run.timed_out
    tickets = list(dict.fromkeys(item.message for item in perturbed if len(item.message) >= 8))
    before = answer_lines(real.stdout, schema, tickets)
    after = answer_lines(run.stdout, schema, tickets)
    if len(before) != len(after):
        found.note = (
            f"`make demo` printed {len(before)} answer lines, {len(after)} with its tapes' answers changed"
            + (" (and failed)" if failed else "")
            + ": not compared line by line"
        )
        return found
    found.compared = len(before)
    found.kept = [line for line, other in zip(before, after, strict=True) if line == other]
    return found


def answer_lines(stdout: str, schema: AnswerSchema, tickets: list[str]) -> list[str]:
    """The lines that show an answer: the label field written with one of the labels, or a ticket's text
    (its first characters) with a label before or after it (a line that only echoes a ticket, or lists the
    labels, shows none)."""
    labels = "|".join(re.escape(label) for label in sorted(schema.labels, key=len, reverse=True))
    if not labels:
        return []
    written = re.compile(rf"""["']?\b{re.escape(schema.label)}\b["']?\s*[:=]\s*["']?(?:{labels})\b""", re.I)
    bare = re.compile(rf"\b(?:{labels})\b", re.I)
    out = []
    for raw in stdout.splitlines():
        line = raw.strip()[:_MAX_LINE]
        if written.search(line):
            out.append(line)
            continue
        for ticket in tickets:
            at = line.find(ticket[:_TICKET_PREFIX])
            if at < 0:
                continue
            # The label must be outside as much of the ticket as the line holds, before or after it: a
            # ticket that itself says "refund" is no answer.
            end = at + _common_prefix(line[at:], ticket)
            if bare.search(line[:at]) or bare.search(line, end):
                out.append(line)
            break
    return out


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
