"""Give each recorded answer another label in a scratch copy's tapes, requests untouched.

Red team 15, F1: a cassette layer that, on a hit, hands back an answer from a table of its own instead of
the tape's passes every check that reads the tape files. What tells it apart is what a run does when the
tapes say something else: a suite (and a triage command) replaying the tapes answers with what the tapes
now hold; one answering from its own table does not. This module makes that copy.

Each JSON object a response's strings hold (a chat completion's content, a message's text block; bare, in
a code fence, or with prose around it) gets another value in its label field and its yes/no field flipped.
The label field is ``intent`` when the answers have one, else the agent's own (red team 16, F2: the short
string field most answers carry with the fewest distinct values, such as ``category``); the other value is
one the submission's own tapes use when they use at least two, else one of the stand-in's. The tape file is
rewritten as text, the answer's JSON-escaped form (also inside double-quoted YAML) replaced at its own
occurrence, so nothing else of the file changes. The result is parsed again: a tape whose requests
changed, or whose answer did not, is put back as it was (then it is not compared). Streamed answers split
over events and compressed bodies are left as they are.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from grader.drift_run import last_user_message
from grader.standin import load_rules
from grader.tapes import Tape, _parse

__all__ = [
    "REFUSAL",
    "AnswerSchema",
    "Perturbed",
    "answer_objects",
    "answer_schema",
    "perturb_copy",
    "refuse_copy",
    "strings_in",
]

_T = TypeVar("_T")
_MAX_DEPTH = 12
# What a model that declines says instead of an answer: no label, no JSON (the drifted stand-in's refusal).
REFUSAL = "I'm sorry, but I can't help with that request."
_MAX_STRINGS = 2_000  # strings looked at per response body (an answer is near the top of any real one)


@dataclass(frozen=True)
class Perturbed:
    """One tape whose recorded answer now says something else: its file, the ticket (last user message of
    the request) and the intent before and after."""

    tape: str  # file:line of the answer as recorded
    message: str
    was: str
    now: str


def strings_in(node: Any, depth: int = 0) -> Iterator[str]:
    """Every string of a parsed JSON (or YAML) value, at most `_MAX_DEPTH` levels down."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings_in(value, depth + 1)
    elif isinstance(node, list):
        for value in node:
            yield from strings_in(value, depth + 1)


def _embedded(text: str) -> dict[str, Any] | None:
    """The JSON object a string holds: all of it, or the part from its first ``{`` to its last ``}`` (an
    answer in a code fence, or with a sentence before or after it)."""
    stripped = text.strip()
    start, end = stripped.find("{"), stripped.rfind("}")
    if start < 0 or end <= start:
        return None
    for candidate in (stripped, stripped[start : end + 1]):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def answer_objects(body: Any) -> list[tuple[str, dict[str, Any]]]:
    """(the string as stored, the JSON object it holds) for each string of a response body that holds one,
    bare or inside a code fence or prose."""
    found = []
    for count, text in enumerate(strings_in(body)):
        if count >= _MAX_STRINGS:
            break
        if "{" in text:
            value = _embedded(text)
            if value:
                found.append((text, value))
    return found


@dataclass(frozen=True)
class AnswerSchema:
    """Which field of the submission's answers is the label, the labels it takes, and its yes/no field."""

    label: str
    labels: list[str]
    flag: str | None


def answer_schema(tapes: Sequence[Tape]) -> AnswerSchema | None:
    """The label field: ``intent`` when the answers have it, else the string field (short values) with the
    fewest distinct values, at least two, among the fields most answers carry (an agent's own schema:
    ``category``, ``label``); the flag: ``needs_human``, else the first yes/no field."""
    answers = [a for t in tapes for i in t.interactions for _, a in answer_objects(i.response_body)]
    if not answers:
        return None
    values: dict[str, dict[str, None]] = {}
    flags: dict[str, None] = {}
    for answer in answers:
        for key, value in answer.items():
            if isinstance(value, str) and 0 < len(value) <= 60:
                values.setdefault(key, {})[value] = None
            elif isinstance(value, bool):
                flags[key] = None
    common = {k: v for k, v in values.items() if sum(k in a for a in answers) * 2 >= len(answers)}
    if "intent" in common:
        label = "intent"
    else:
        enums = [k for k, v in common.items() if 2 <= len(v) <= 50]
        if not enums:
            return None
        label = min(enums, key=lambda k: len(common[k]))
    labels = list(common[label])
    if len(labels) < 2:
        rules = load_rules()
        labels = list(dict.fromkeys([*labels, *(name for name, _ in rules.intents), rules.default_intent]))
    flag = "needs_human" if "needs_human" in flags else next(iter(flags), None)
    return AnswerSchema(label, labels, flag)


def _other(label: str, labels: list[str], shift: int) -> str:
    """The label ``shift`` places after ``label`` in ``labels``, never ``label`` itself."""
    at = labels.index(label) if label in labels else -1
    ring = [x for x in labels[at + 1 :] + labels[: at + 1] if x != label]
    return ring[(shift - 1) % len(ring)] if ring else label


def _changed(text: str, schema: AnswerSchema, now: str) -> str:
    """``text`` with its first value of the label field set to ``now`` and its first flag flipped."""
    field_re = re.compile(r'("' + re.escape(schema.label) + r'"\s*:\s*")((?:[^"\\]|\\.){1,200})(")')
    text = field_re.sub(lambda m: m.group(1) + json.dumps(now)[1:-1] + m.group(3), text, count=1)
    if schema.flag is None:
        return text
    flag_re = re.compile(r'("' + re.escape(schema.flag) + r'"\s*:\s*)(true|false)\b')
    return flag_re.sub(lambda m: m.group(1) + ("false" if m.group(2) == "true" else "true"), text, count=1)


def _written_forms(text: str) -> list[str]:
    """How a response string may be written in a tape file: JSON-escaped (ASCII or not), and that again
    inside a double-quoted YAML scalar. Always four, in that order, so that two strings' forms pair up (a
    non-ASCII answer has two JSON forms where its replacement may have one)."""
    forms = [json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]]
    return forms + [form.replace("\\", "\\\\").replace('"', '\\"') for form in forms]


def _replace_at(text: str, pos: int, stored: str, now: str) -> tuple[int, str, int] | None:
    """``stored`` (a response string) replaced by ``now`` at its next written occurrence from ``pos``
    (interactions are stored in order); (where it was, the new text, where to look next), or None."""
    for old, new in zip(_written_forms(stored), _written_forms(now), strict=True):
        at = text.find(old, pos)
        if at >= 0:
            return at, text[:at] + new + text[at + len(old) :], at + len(new)
    return None


def _requests(tape: Tape) -> list[tuple[Any, ...]]:
    return [(i.method, i.url, i.path, i.request_body) for i in tape.interactions]


def _perturb_one(tape: Tape, schema: AnswerSchema, shift: int) -> tuple[str, list[Perturbed]] | None:
    text = tape.text
    done = []
    pos = 0  # interactions are stored in order: each answer is the next occurrence of its written form
    for inter in tape.interactions:
        for stored, answer in answer_objects(inter.response_body):
            was = answer.get(schema.label)
            if not isinstance(was, str):
                continue
            now = _other(was, schema.labels, shift)
            changed = _changed(stored, schema, now)
            if changed == stored:
                continue
            replaced = _replace_at(text, pos, stored, changed)
            if replaced is not None:
                at, text, pos = replaced
                where = f"{tape.path}:{text.count(chr(10), 0, at) + 1}"
                done.append(Perturbed(where, last_user_message(inter.request_body), was, now))
    if not done:
        return None
    again = _parse(tape.path, text)
    if again.format == "invalid" or _requests(again) != _requests(tape):
        return None
    after = [a.get(schema.label) for i in again.interactions for _, a in answer_objects(i.response_body)]
    if not all(item.now in after for item in done):
        return None
    return text, done


def perturb_copy(tapes: Sequence[Tape], copy: Path, *, shift: int = 1) -> list[Perturbed]:
    """Rewrite, in ``copy`` (a scratch copy of the repository the tapes were read from), every tape whose
    answers can be given another label; what was changed, one item per answer. ``shift``: which other
    label (the next one, or the one after: two copies with different shifts give each answer two
    different labels when there are three or more)."""
    readable = [t for t in tapes if t.format != "invalid" and t.text]
    schema = answer_schema(readable)
    if schema is None:
        return []
    return [
        item
        for done in _rewrite_copy(readable, copy, lambda t: _perturb_one(t, schema, shift))
        for item in done
    ]


def _refuse_one(tape: Tape) -> tuple[str, int] | None:
    text = tape.text
    done = 0
    pos = 0
    for inter in tape.interactions:
        for stored, _ in answer_objects(inter.response_body):
            replaced = _replace_at(text, pos, stored, REFUSAL)
            if replaced is not None:
                _, text, pos = replaced
                done += 1
    if not done:
        return None
    again = _parse(tape.path, text)
    if again.format == "invalid" or _requests(again) != _requests(tape):
        return None
    if any(answer_objects(i.response_body) for i in again.interactions):
        return None
    return text, done


def refuse_copy(tapes: Sequence[Tape], copy: Path) -> int:
    """Rewrite, in ``copy``, every tape whose recorded answers can all be replaced by ``REFUSAL`` (the whole
    string that held each answer, requests untouched); how many answers were replaced."""
    readable = [t for t in tapes if t.format != "invalid" and t.text]
    return sum(_rewrite_copy(readable, copy, _refuse_one))


def _rewrite_copy(
    tapes: Sequence[Tape], copy: Path, one: Callable[[Tape], tuple[str, _T] | None]
) -> list[_T]:
    """Each tape ``one`` rewrites, written into ``copy``; what ``one`` said of each tape written."""
    out = []
    for tape in tapes:
        result = one(tape)
        if result is None:
            continue
        try:
            _rewrite(copy / tape.path, result[0])
        except OSError:
            continue
        out.append(result[1])
    return out


def _rewrite(path: Path, text: str) -> None:
    """Overwrite the copy's file in place (its mode kept); a link or a non-file there is not written."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "wb") as out:
        out.write(text.encode("utf-8"))
