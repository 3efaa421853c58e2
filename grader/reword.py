"""Re-word the recorded user messages wherever a copy of the repository's own text files holds them.

The loud-miss check's re-worded rerun (red-team R5, R5b, R5c) needs the suite's own calls to send requests
no tape ever held, without knowing how the submission stores its inputs: every occurrence of a recorded
message in a text file (a data file, a test, a fixture), in the plain, JSON-escaped, Python-escaped or
CSV-quoted form, is replaced by the same message with one word inserted, consistently everywhere, so the
suite's own library calls carry inputs nobody recorded while its expectations still line up.

`plan` picks the re-wordings, `reword_copy` finds the occurrences in the pristine tree (through the one
walker, never following a link, sizes capped) and rewrites the matching files of a scratch copy.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from grader import walk
from grader.safeio import read_bytes

__all__ = ["Rewording", "plan", "reword_copy"]

# A message shorter than this, or of one word, could sit inside ordinary code or prose ("Hello"): left alone.
_MIN_CHARS = 12
# Ordinary words a customer might add anywhere in a sentence; one of them goes in at a random word boundary
# of the message's second half (a parametrized test id built from the message's start stays the same).
_WORDS = ("really", "still", "also", "just", "now", "again", "actually", "honestly")
_FILE_CAP = 4_000_000  # a text file bigger than this is not an input the suite feeds the agent by hand
_MAX_FILES = 20_000
_MAX_BYTES = 256_000_000
_SHOWN_PLACES = 200  # file:line places kept for the evidence (the count is exact)


def _escaped_py(text: str, quote: str) -> str:
    escaped = text.replace("\\", "\\\\").replace(quote, "\\" + quote)
    return escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


# How a message may be written down in a text file: the replacement is written the same way. JSON with and
# without ASCII escapes (a double-quoted YAML scalar too), a Python literal in either quote, a CSV field's
# doubled quotes, a single-quoted YAML scalar's.
_FORMS: tuple[Callable[[str], str], ...] = (
    lambda text: text,
    lambda text: json.dumps(text, ensure_ascii=False)[1:-1],
    lambda text: json.dumps(text)[1:-1],
    lambda text: _escaped_py(text, "'"),
    lambda text: _escaped_py(text, '"'),
    lambda text: text.replace('"', '""'),
    lambda text: text.replace("'", "''"),  # a single-quoted YAML scalar
)


def _eligible(message: str) -> bool:
    return len(message) >= _MIN_CHARS and len(message.split()) >= 2


def _reworded(message: str, taken: Collection[str] = ()) -> str:
    """``message`` with one word inserted at a random word boundary of its second half, not in ``taken``."""
    words = message.split(" ")
    while True:
        at = len(words) // 2 + secrets.randbelow(max(1, len(words) - len(words) // 2))
        at = max(1, at)
        candidate = " ".join([*words[:at], secrets.choice(_WORDS), *words[at:]])
        if candidate not in taken and candidate != message:
            return candidate


def plan(messages: Iterable[str]) -> dict[str, str]:
    """Recorded message -> its re-wording, for every message long enough to be found safely. A message of
    several lines is also taken line by line: the agent may have wrapped the customer's words in a template
    (``<message>\n...\n</message>``) that the suite's inputs never hold."""
    recorded: set[str] = set()
    for message in messages:
        recorded.add(message)
        lines = message.splitlines()
        if len(lines) > 1:
            recorded.update(line.strip() for line in lines)
    recorded.discard("")
    return {m: _reworded(m, recorded) for m in sorted(recorded) if _eligible(m)}


@dataclass
class Rewording:
    """What `reword_copy` changed: occurrences replaced, files rewritten (repo-relative), the first
    ``file:line`` places, and how many recorded messages were found at least once."""

    occurrences: int = 0
    files: list[str] = field(default_factory=list)
    places: list[str] = field(default_factory=list)
    found: int = 0


def _pattern(mapping: dict[str, str]) -> tuple[re.Pattern[str], dict[str, tuple[str, str]]]:
    """One alternation over every written form of every message, longest first (a message inside a longer
    one is replaced as part of it), each bounded by a character that is not a letter or digit."""
    forms: dict[str, tuple[str, str]] = {}  # written form -> (its replacement, the recorded message)
    for message, new in mapping.items():
        for encode in _FORMS:
            forms.setdefault(encode(message), (encode(new), message))
    alternatives = sorted(forms, key=len, reverse=True)
    body = "|".join(re.escape(a) for a in alternatives)
    return re.compile(rf"(?<![^\W_])(?:{body})(?![^\W_])"), forms


def reword_copy(source: Path, dest: Path, mapping: dict[str, str], *, leave: Path | None = None) -> Rewording:
    """Replace every occurrence of each message of ``mapping`` in the text files of ``source`` (the pristine
    tree) in the same files of ``dest`` (a copy of it). ``leave``: a repo-relative folder not rewritten
    (the tapes'). Files are UTF-8 without NUL bytes, under the size cap; links and `walk.SKIPPED` folders are
    never entered."""
    done = Rewording()
    if not mapping:
        return done
    pattern, forms = _pattern(mapping)
    found: set[str] = set()
    left = source / leave if leave is not None else None
    for path in walk.files(source, max_files=_MAX_FILES, max_bytes=_MAX_BYTES):
        if left is not None and path.is_relative_to(left):
            continue
        rel = path.relative_to(source)
        try:
            raw = read_bytes(path, cap=_FILE_CAP, root=source)
        except OSError:
            continue
        if b"\0" in raw:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        hits = list(pattern.finditer(text))
        if not hits:
            continue
        for hit in hits:
            found.add(forms[hit.group(0)][1])
            if len(done.places) < _SHOWN_PLACES:
                done.places.append(f"{rel.as_posix()}:{text.count(chr(10), 0, hit.start()) + 1}")
        _rewrite(dest / rel, pattern.sub(lambda m: forms[m.group(0)][0], text))
        done.occurrences += len(hits)
        done.files.append(rel.as_posix())
    done.found = len(found)
    return done


def _rewrite(path: Path, text: str) -> None:
    """Overwrite the copy's file in place (its mode kept); a link or a non-file there is not written."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "wb") as out:
        out.write(text.encode("utf-8"))
