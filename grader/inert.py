"""Make text that came from a submission inert before a reviewer's terminal, editor or spreadsheet reads it.

Test ids, skip reasons, failure messages, paths, commit messages and file excerpts all reach the reports.
A terminal obeys escape sequences in them (retitle the window, move the cursor, erase the real rows and print
a fake total), bidi overrides make a line read differently than it is stored, and a spreadsheet runs a CSV
cell that starts like a formula. Reports pass through `inert_tree` once, in `grader.report.render`, so every
format gets the same treatment; `csv_cell` guards `summary.csv`.

Control characters are *escaped*, not dropped: the evidence still shows that something was there
(``\\x1b[2J`` reads as text), and nothing the reviewer sees can act.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

__all__ = ["csv_cell", "draws_nothing", "inert", "inert_tree", "visible"]

# C0 except tab and newline (kept: they are whitespace every renderer already handles), DEL, C1, the
# bidi embeddings/overrides/isolates, the line/paragraph separators some terminals and editors obey, and
# lone surrogates (red team 7, R7-3: one in a skip reason made the report unwritable as UTF-8: exit 1, no
# report, the candidate "not assessable").
_ACTIVE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
    # and what draws nothing inside a word (zero-width space and joiners, soft hyphen, word joiner, the
    # combining grapheme joiner, a BOM): red team 32 named test files and functions with them
    "\u00ad\u034f\u200b-\u200d\u2060-\u2064\ufeff]"
)
# Starts of a cell a spreadsheet evaluates (OWASP "CSV injection"): formulas, and tab/CR that some
# importers strip before looking at the next character.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """``text`` with every control character escaped as ``\\xNN``/``\\uNNNN`` (tab and newline kept)."""
    return _ACTIVE.sub(_escape, text) if _ACTIVE.search(text) else text


def draws_nothing(char: str) -> bool:
    """Whether ``char`` shows nothing where it stands: a format character (zero-width space and joiners,
    soft hyphen, word joiner, bidi marks) or the combining grapheme joiner."""
    return unicodedata.category(char) == "Cf" or char == "\u034f"


def visible(text: str) -> str:
    """``text`` as a reader sees it, without the characters that draw nothing: what a check matching words
    reads (red team 32: a REPLAY.md whose every `TODO` was written `TO\u200bDO` counted as filled in)."""
    return "".join(c for c in text if not draws_nothing(c)) if not text.isascii() else text


def inert_tree(value: Any) -> Any:
    """A copy of a JSON-like value (dicts, lists, tuples, strings, numbers) with every string made inert,
    keys included; other values are returned as they are."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {inert_tree(k) if isinstance(k, str) else k: inert_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert_tree(item) for item in value]
    return value


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: inert, and prefixed with ``'`` when it starts like a formula.

    Numbers are left as numbers (a negative number is data, not a formula).
    """
    if not isinstance(value, str):
        return value
    return "'" + inert(value) if value.startswith(_FORMULA_START) else inert(value)
