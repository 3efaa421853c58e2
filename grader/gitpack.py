"""The objects of a git pack file, inflated, read without git.

The canary probe looks for its key in what a recording wrote, and a recorder that commits and repacks
(``git gc``) leaves it only inside a pack (red team 12, F2). Running git there would run it on the
configuration the recording could write, as the grader; parsing the pack in Python reads bytes and runs
nothing. Only what each entry holds is wanted, not the objects it stands for: a delta's inflated body is
its copy and insert instructions, and whatever text the run added is inserted verbatim, so it is found in
the delta itself without resolving its base.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["PACK_MAGIC", "Allowance", "pack_bodies"]

PACK_MAGIC = b"PACK"
_OFS_DELTA, _REF_DELTA = 6, 7
_CHUNK = 1 << 16


@dataclass
class Allowance:
    """What reading packs may still cost: inflated bytes, and entries (each costs Python time whatever it
    inflates to: red team 14, a run wrote a pack of 3 million empty blobs, minutes of the grader's CPU)."""

    bytes: int
    entries: int

    def spent(self) -> bool:
        return self.bytes <= 0 or self.entries <= 0


def pack_bodies(data: bytes, allowance: Allowance) -> Iterator[bytes]:
    """The inflated body of each entry of the pack in ``data``, in pack order, while ``allowance`` lasts
    (taken from as entries are read: ``allowance.spent()`` afterwards means the pack was not read to its end).

    A truncated or corrupt pack ends the iteration where it stops making sense: what came before is
    still yielded.
    """
    if data[:4] != PACK_MAGIC or len(data) < 12:
        return
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3):
        return
    view = memoryview(data)
    pos = 12
    for _ in range(count):
        if allowance.spent():
            return
        allowance.entries -= 1
        budget = allowance.bytes
        entry = _entry_start(view, pos)
        if entry is None:
            return
        kind, start = entry
        found = None
        # A REF_DELTA names its base by object id: 20 bytes in a SHA-1 repository, 32 in a SHA-256 one.
        for skip in (20, 32) if kind == _REF_DELTA else (0,):
            found = _inflate(view, start + skip, budget)
            if found is not None:
                break
        if found is None:
            return
        body, pos = found
        allowance.bytes -= len(body)
        yield body


def _entry_start(view: memoryview, pos: int) -> tuple[int, int] | None:
    """(type, offset just past the entry's header) for the entry at ``pos``; None when it is cut off."""
    try:
        byte = view[pos]
        kind = (byte >> 4) & 7
        pos += 1
        while byte & 0x80:  # the rest of the object's size: not needed, zlib knows where it ends
            byte = view[pos]
            pos += 1
        if kind == _OFS_DELTA:
            byte = view[pos]
            pos += 1
            while byte & 0x80:
                byte = view[pos]
                pos += 1
    except IndexError:
        return None
    return kind, pos


def _inflate(view: memoryview, pos: int, budget: int) -> tuple[bytes, int] | None:
    """(the zlib stream at ``pos`` inflated, up to ``budget`` bytes; the offset just past it)."""
    stream = zlib.decompressobj()
    out = bytearray()
    fed = pos
    try:
        while not stream.eof and fed < len(view):
            chunk = view[fed : fed + _CHUNK]
            fed += len(chunk)
            out += stream.decompress(chunk, max(budget - len(out), 1))
            while stream.unconsumed_tail and len(out) < budget:
                out += stream.decompress(stream.unconsumed_tail, budget - len(out))
            if len(out) >= budget:
                return bytes(out[:budget]), len(view)  # the rest of the pack is past the budget
    except zlib.error:
        return None
    if not stream.eof:
        return None
    return bytes(out), fed - len(stream.unused_data)
