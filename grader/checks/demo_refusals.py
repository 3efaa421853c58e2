"""The drift check's demo run: does `make demo`'s batch path make up answers the model never gave?

The drift probe asks the triage command one message at a time. Red team 21, F1b: a `--file` batch path (the
one `make demo` runs) that turned each ticket whose model answer could not be parsed into
``{"intent": "other"}``, while a replay miss still raised, kept model-drift at 3: the single-message path
failed loudly on every drifted answer, and the withheld-tape demo failed loudly on its misses.

So `make demo` runs once more, offline, in a copy whose tapes hold a refusal where every recorded answer was
(grader/perturb.py ``refuse_copy``: the whole string that held the answer becomes a sentence with no label
and no JSON, requests untouched, so every request still hits its tape). No label can come from those tapes.
When the demo's own run exited 0 and this one exits 0 too, an answer line it prints (the label field with
its value, or a ticket's text with a label: grader/checks/demo_answers.py) that its own run did not print was
made up. A demo that stops, or goes on and says it could not triage a ticket without naming a label, prints
none; an agent whose own rules label a ticket without the model prints the same line both times, which the
demo comparison of the replay row reads instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.checks.demo_answers import answer_lines
from grader.checks.demo_run import demo_with_tapes_rewritten
from grader.drift_run import last_user_message
from grader.perturb import refuse_copy

if TYPE_CHECKING:
    from grader.context import Context

__all__ = ["DemoRefusals", "demo_refusals"]

LABEL = "demo-refused"


@dataclass
class DemoRefusals:
    where: str  # the Makefile's `demo` rule (file:line)
    refused: int = 0  # recorded answers replaced by a refusal
    exit_code: int | None = None  # the demo's exit on the refused tapes (None: timed out)
    made_up: list[str] = field(default_factory=list)  # answer lines printed there and not in its own run


def demo_refusals(ctx: Context) -> DemoRefusals | None:
    """The demo on refused tapes, made once per grade; None when there is nothing to run (no demo target, no
    environment, no answer to replace, the demo's own run failed)."""
    return ctx.memo("demo refusals", lambda: _demo_refusals(ctx))


def _demo_refusals(ctx: Context) -> DemoRefusals | None:
    demo = demo_with_tapes_rewritten(ctx, LABEL, refuse_copy, "answers refused")
    if demo is None:
        return None
    run = demo.run
    found = DemoRefusals(demo.where, demo.rewritten, None if run.timed_out else run.returncode)
    if found.exit_code != 0:
        return found
    messages = [last_user_message(i.request_body) for t in demo.tapes for i in t.interactions]
    tickets = [m for m in dict.fromkeys(messages) if len(m) >= 8]
    own = set(answer_lines(demo.real.stdout, demo.schema, tickets))
    found.made_up = [line for line in answer_lines(run.stdout, demo.schema, tickets) if line not in own]
    return found
