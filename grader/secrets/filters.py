"""Filters applied to each regex match: token boundaries, placeholders, entropy, repetition."""

from __future__ import annotations

import itertools
import math
import re
import zlib
from collections import Counter

__all__ = ["is_placeholder", "left_boundary_ok", "shannon_entropy"]

_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_JSON_ESCAPE_LETTERS = frozenset(b"nrtbf")
_UNICODE_ESCAPE = re.compile(rb"\\u[0-9a-fA-F]{4}\Z")

# Case-insensitive substrings that mark documentation values, test doubles and scrubbed tapes.
_PLACEHOLDER_WORDS = (
    "xxxx",
    "****",
    "...",
    "…",
    "example",
    "redacted",
    "filtered",
    "your_",
    "your-",
    "yourkey",
    "dummy",
    "fake",
    "test-key",
    "test_key",
    "testkey",
    "placeholder",
    "changeme",
    "change_me",
    "sample",
    "secret",
    "api_key",
    "api-key",
    "apikey",
    "token",
    "password",
    "abcdef",
    "123456",
    "<",
    ">",
    "${",
    "{{",
)
_MAX_RUN = 6  # a character repeated this often in a row (p < 1e-3 even for digit-only parts) is typed


def left_boundary_ok(data: bytes, start: int) -> bool:
    """True when the match at ``start`` begins a token, also behind a JSON escape or URL encoding.

    A word character before the match means it is the tail of a longer token (``task-`` is not ``sk-``),
    except when that character ends an escape: ``\\nsk-``, ``\\u0022sk-``, ``%3Dsk-``, ``%22sk-``.
    """
    if start == 0 or data[start - 1] not in _WORD:
        return True
    before = data[start - 1]
    if before in _JSON_ESCAPE_LETTERS and start >= 2 and data[start - 2] == 0x5C:  # backslash
        return True
    if start >= 3 and data[start - 3] == 0x25 and data[start - 2] in _HEX and before in _HEX:  # %XX
        return True
    return start >= 6 and _UNICODE_ESCAPE.search(data, start - 6, start) is not None


# Sixteen symbols cap hex at 4 bits a character, and a short random hex key often draws fewer: 1.7% of
# random 32-character keys fall under 3.3 (a rule's usual floor), 0.01% under 3.0. Placeholders made of hex
# (repeated runs, "deadbeef" patterns) are caught as repetitive, not by their entropy. A floor above 4 says
# the format is not hex (ClickHouse's secret), and stays.
_HEX_KEY = re.compile(r"[0-9a-fA-F]{32,}")
_HEX_FLOOR = 3.0


def _entropy_floor(body: str, min_entropy: float) -> float:
    return min(min_entropy, _HEX_FLOOR) if min_entropy <= 4 and _HEX_KEY.fullmatch(body) else min_entropy


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text`` (0 for empty text)."""
    if not text:
        return 0.0
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in Counter(text).values())


def _repetitive(body: str, *, runs: bool = True) -> bool:
    if runs and _has_long_run(body):
        return True
    # Patterns such as "aB3aB3aB3..." have decent per-character entropy but compress to almost nothing.
    if len(body) >= 24:
        return len(zlib.compress(body.encode("utf-8", "replace"), 9)) < 0.6 * len(body)
    return False


def _has_long_run(body: str) -> bool:
    run = 1
    for prev, cur in itertools.pairwise(body):
        run = run + 1 if cur == prev else 1
        # Digit-only parts (Slack ids) repeat digits by chance more often than mixed alphabets do.
        if run >= (_MAX_RUN + 2 if cur.isdigit() else _MAX_RUN):
            return True
    return False


def is_placeholder(
    body: str, *, min_entropy: float, require_digit: bool = False, runs_allowed: bool = False
) -> bool:
    """True when ``body`` (the secret without its fixed prefix) is a placeholder rather than a key;
    ``runs_allowed``: a character repeated many times in a row is part of the format, not a sign."""
    lowered = body.lower()
    if any(word in lowered for word in _PLACEHOLDER_WORDS):
        return True
    if require_digit and not any(ch.isdigit() for ch in body):
        return True
    if shannon_entropy(body) < _entropy_floor(body, min_entropy):
        return True
    return _repetitive(body, runs=not runs_allowed)
