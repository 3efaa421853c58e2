"""Literals of a regex: a short set of byte strings, one of which occurs in every match.

A rule's regex can only match where one of its prefixes occurs, so the scanner searches all rules' prefixes
in one pass and runs a rule's regex only on text holding one of them. ``hf_[A-Za-z]{34}`` gives the 52
strings ``hf_A`` ... ``hf_z``: ``hf_`` followed by a space, a quote or a digit no longer sends the whole file
through the regex, while a key always does.

The prefixes come from the regex's parse tree (the ``re`` module's own parser), expanded one byte at a time
while the set stays within a limit. Anything the expansion does not model (lookarounds, ``\\d``, negated sets,
flags, back references) ends a prefix where it stands: a shorter prefix is still one that every match starts
with, only less selective.
"""

from __future__ import annotations

import functools
import sys
from typing import cast

if sys.version_info >= (3, 11):
    from re import _constants as _sre
    from re import _parser as _sre_parse
else:  # pragma: no cover - exercised on 3.10 only
    import sre_constants as _sre
    import sre_parse as _sre_parse

__all__ = ["match_prefixes"]

_MAX_DEPTH = 32

# Items of a sequence: ("set", bytes of possible values) consumes one byte; ("alt", (seq, ...)),
# ("rep", min, max, seq) and ("end",) consume none. "end" stops the expansion: the prefix so far is final.
_Item = tuple[object, ...]
_Seq = tuple[_Item, ...]
_END: _Item = ("end",)


@functools.lru_cache(maxsize=256)
def match_prefixes(regex: bytes, limit: int = 256) -> frozenset[bytes]:
    """Byte strings, at most ``limit`` of them, one of which occurs in every match of ``regex``.

    Each is, or is part of, a prefix of a match: the longest prefixes that keep the set within ``limit``.
    None contains another. Empty when no non-empty literal can be derived (the regex may match anywhere).
    """
    try:
        parsed = _sre_parse.parse(regex)  # type: ignore[arg-type]  # sre parses bytes patterns too
    except _sre.error:  # no prefixes; compiling the rule says what is wrong
        return frozenset()
    if parsed.state.flags & (_sre.SRE_FLAG_IGNORECASE | _sre.SRE_FLAG_LOCALE):
        return frozenset()
    return _expand(_convert(parsed.data), limit)


def _convert(items: object) -> _Seq:
    out: list[_Item] = []
    for op, av in items:  # type: ignore[attr-defined]
        if op is _sre.LITERAL:
            out.append(("set", bytes([av])))
        elif op is _sre.IN:
            values = _charset(av)
            out.append(("set", values) if values else _END)
        elif op is _sre.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if add_flags or del_flags:  # (?i:...) and friends change what the bytes mean
                out.append(_END)
            else:
                out.extend(_convert(sub))
        elif op is _sre.BRANCH:
            out.append(("alt", tuple(_convert(alt) for alt in av[1])))
        elif op is _sre.MAX_REPEAT or op is _sre.MIN_REPEAT:
            low, high, sub = av
            seq = _convert(sub)
            # A body that may match nothing would expand forever without consuming a byte.
            out.append(("rep", low, high, seq) if not _nullable(seq) else _END)
        else:  # lookarounds, anchors, ANY, categories, back references, possessive and atomic forms
            out.append(_END)
    return tuple(out)


def _charset(av: list[tuple[object, object]]) -> bytes | None:
    values: set[int] = set()
    for kind, value in av:
        if kind is _sre.LITERAL:
            values.add(value)  # type: ignore[arg-type]
        elif kind is _sre.RANGE:
            low, high = cast("tuple[int, int]", value)
            values.update(range(low, high + 1))
        else:  # NEGATE, CATEGORY (\d, \w, \s): not expanded
            return None
    return bytes(sorted(values))


def _nullable(seq: _Seq) -> bool:
    for item in seq:
        if item[0] == "set":
            return False
        if item[0] == "alt" and not any(_nullable(alt) for alt in item[1]):  # type: ignore[attr-defined]
            return False
        if item[0] == "rep" and item[1] > 0 and not _nullable(item[3]):  # type: ignore[operator, arg-type]
            return False
    return True  # "end" counts as possibly empty: it is unknown what it matches


def _firsts(seq: _Seq) -> list[tuple[bytes | None, _Seq]]:
    """Each way ``seq`` can begin: (the byte values it may consume first, the rest), or (None, ()) when the
    expansion stops there."""
    if not seq:
        return [(None, ())]
    head, rest = seq[0], seq[1:]
    kind = head[0]
    if kind == "set":
        return [(head[1], rest)]  # type: ignore[list-item]
    if kind == "alt":
        return [first for alt in head[1] for first in _firsts(alt + rest)]  # type: ignore[attr-defined]
    if kind == "rep":
        low, high, body = head[1], head[2], head[3]
        out = _firsts(rest) if low == 0 else []
        if high != 0:
            again = high if high == _sre.MAXREPEAT else high - 1  # type: ignore[operator]
            out += _firsts((*body, ("rep", max(low - 1, 0), again, body), *rest))  # type: ignore[operator,misc]
        return out
    return [(None, ())]


def _expand(seq: _Seq, limit: int) -> frozenset[bytes]:
    done: set[bytes] = set()  # prefixes whose expansion stopped
    # Prefixes grouped by what is left of the pattern after them: ``hf_A`` ... ``hf_z`` share one rest,
    # which is expanded once for all of them.
    active: dict[_Seq, set[bytes]] = {seq: {b""}}
    for _ in range(_MAX_DEPTH):
        stopped = set(done)
        steps: list[tuple[set[bytes], bytes, _Seq]] = []
        for rest, prefixes in active.items():
            for values, after in _firsts(rest):
                if values is None:
                    stopped |= prefixes
                else:
                    steps.append((prefixes, values, after))
        # Counted before the strings are made, repeats included: an upper bound of the next level's size.
        if len(stopped) + sum(len(prefixes) * len(values) for prefixes, values, _ in steps) > limit:
            break
        grown: dict[_Seq, set[bytes]] = {}
        for prefixes, values, after in steps:
            bucket = grown.setdefault(after, set())
            bucket.update(prefix + bytes([value]) for prefix in prefixes for value in values)
        done, active = stopped, grown
        if not active:
            break
    return _minimal(done.union(*active.values()))


def _minimal(literals: set[bytes]) -> frozenset[bytes]:
    # A literal that contains another adds nothing to "does one of them occur"; an empty one means "anywhere".
    if b"" in literals:
        return frozenset()
    kept: set[bytes] = set()
    lengths: set[int] = set()
    for literal in sorted(literals, key=len):
        if not any(literal[i : i + n] in kept for n in lengths for i in range(len(literal) - n + 1)):
            kept.add(literal)
            lengths.add(len(literal))
    return frozenset(kept)
