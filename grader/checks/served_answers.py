"""What the suite's HTTP client was handed, held against the tapes the cassette layer opened for it.

Red team 17: a suite whose requests differ from the triage command's (one prompt line set by a test
module), with both sets recorded, keeps a table of answers of its own past both probes that ask the triage
command about a ticket: the command sends another request, is answered from another tape (or misses
loudly), and says nothing about the suite's. So the guard watches the suite's own process instead
(``_watch_sends`` in grader/audit/_grader_guard.py): for each request during which the cassette layer
opened, or tried to open, a file of the repository, it logs the request and the response the client got
back. Here, in the replay run:

- the layer opened tapes and the client was handed an answer none of them holds: the answer came from
  somewhere else (``replaced``, the replay row's ``answers_replaced``);
- the layer opened no tape, only tried paths that do not exist, and the client was still handed an answer
  that no tape of that ticket holds: an answer made up on a miss (``invented``, loud-miss's
  ``miss_answers_served``).

An answer is the label and yes/no value of the JSON object the response's strings hold (grader/perturb.py
finds it the same way in the tapes). Not seen: a layer that is not an httpx/httpx2 transport (requests,
aiohttp, a patched SDK method), one that replaces ``send`` inside a test, a streamed response (not read by
the guard), and tapes whose answers the grader cannot read (compressed, streamed): those are never taken
for evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grader.drift_run import last_user_message
from grader.errors import NotAssessable
from grader.perturb import AnswerSchema, answer_objects, answer_schema
from grader.tapes import Tape, tapes_of

if TYPE_CHECKING:
    from grader.context import Context
    from grader.tamper import Send

__all__ = ["Served", "ServedAnswers", "served_answers"]

_Answer = tuple[str, bool | None]  # (label, yes/no value or None)


@dataclass(frozen=True)
class Served:
    """One request answered with something no tape it should have come from holds."""

    test: str
    where: str  # the tape's file:line (replaced), or the layer's line that tried the missing path (invented)
    message: str  # the ticket: the request's last user message
    sent: str  # the answer the client was handed, as "label" or "label/flag"
    held: str  # what the tapes hold for it ("" when none does)
    tried: str = ""  # the missing path the layer tried (invented only)


@dataclass
class ServedAnswers:
    watched: int = 0  # requests logged: the layer opened or tried a file of the repository
    replaced: list[Served] = field(default_factory=list)
    invented: list[Served] = field(default_factory=list)


def served_answers(ctx: Context) -> ServedAnswers | None:
    """Made once per grade from the replay run; None when that run has no guard log (or could not run)."""
    return ctx.memo("served answers", lambda: _served(ctx))


def _served(ctx: Context) -> ServedAnswers | None:
    try:
        run = ctx.replay_run()
    except NotAssessable:
        return None
    if run.guard is None:
        return None
    result = ServedAnswers(watched=len(run.guard.sends))
    if not run.guard.sends:
        return result
    tapes = {tape.path: tape for tape in tapes_of(ctx) if tape.format != "invalid"}
    schema = answer_schema(list(tapes.values()))
    if schema is None:
        return result
    by_message: dict[str, set[_Answer]] = {}
    unreadable: set[str] = set()  # tickets recorded in an interaction whose answer cannot be read
    for tape in tapes.values():
        for inter in tape.interactions:
            message = last_user_message(inter.request_body)
            answers = _answers(inter.response_body, schema)
            if answers:
                by_message.setdefault(message, set()).update(answers)
            else:
                unreadable.add(message)
    for send in run.guard.sends:
        _judge(send, tapes, schema, by_message, unreadable, result)
    return result


def _judge(
    send: Send,
    tapes: dict[str, Tape],
    schema: AnswerSchema,
    by_message: dict[str, set[_Answer]],
    unreadable: set[str],
    result: ServedAnswers,
) -> None:
    sent = _answers(_json(send.response), schema)
    if not sent:
        return  # not an answer (an error body, a streamed one): nothing to hold against a tape
    message = last_user_message(_json(send.request))
    opened = [tapes[path] for path in send.opened if path in tapes]
    if opened:
        held = {a for t in opened for inter in t.interactions for a in _answers(inter.response_body, schema)}
        if held and not sent <= held:
            tape = opened[0]
            result.replaced.append(
                Served(send.test, _answer_line(tape, schema), message, _shown(sent - held), _shown(held))
            )
    elif send.missing and message and message not in unreadable:
        held = by_message.get(message, set())
        if not sent <= held:
            result.invented.append(
                Served(send.test, send.site, message, _shown(sent - held), _shown(held), send.missing[0])
            )


def _answers(body: Any, schema: AnswerSchema) -> set[_Answer]:
    found = set()
    for _, value in answer_objects(body):
        label = value.get(schema.label)
        if isinstance(label, str):
            flag = value.get(schema.flag) if schema.flag else None
            found.add((label, flag if isinstance(flag, bool) else None))
    return found


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _shown(answers: set[_Answer]) -> str:
    shown = (label if flag is None else f"{label}/{str(flag).lower()}" for label, flag in answers)
    return ", ".join(sorted(shown))


def _answer_line(tape: Tape, schema: AnswerSchema) -> str:
    """file:line of the tape's first recorded answer (its label field), else of its first interaction."""
    needle = f'"{schema.label}'
    for at, line in enumerate(tape.text.splitlines(), 1):
        if needle in line or f'\\"{schema.label}' in line:
            return f"{tape.path}:{at}"
    first = tape.interactions[0].line if tape.interactions else 1
    return f"{tape.path}:{first or 1}"
