"""Compressed bodies known by their first bytes (gzip, zlib, xz, bzip2), inflated block by block to a cap.

One copy for both readers of compressed files: the secret scan (grader/secrets/tree.py) and the canary
record probe (grader/checks/canary.py).
"""

from __future__ import annotations

import bz2
import lzma
import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator

__all__ = ["ZIP_CENTRAL", "ZIP_LOCAL", "ZIP_MEMBER_ERRORS", "Inflated", "compression"]

# A zip archive's local-file and central-directory signatures (an archive is known by the first; the
# second, counted, bounds its members before it is opened).
ZIP_LOCAL, ZIP_CENTRAL = b"PK\x03\x04", b"PK\x01\x02"
# What a zip member that cannot be read raises: encrypted (RuntimeError), an unknown method
# (NotImplementedError), a bad CRC or header (BadZipFile), a cut or corrupt stream.
ZIP_MEMBER_ERRORS = (
    RuntimeError,
    NotImplementedError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
)

_GZIP = b"\x1f\x8b"
# xz and bzip2 single-file compression (red team 6).
_XZ = b"\xfd7zXZ\x00"
_BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")
# What the head of a zlib candidate is tried on: enough to reject text that only starts like one.
_PROBE = 8192


def compression(head: bytes) -> str | None:
    """ "gzip", "zlib", "xz" or "bzip2" for a body starting with ``head``; None for anything else."""
    if head[:2] == _GZIP:
        return "gzip"
    if head.startswith(_XZ):
        return "xz"
    if _BZIP2.match(head):
        return "bzip2"
    if _is_zlib(head):
        return "zlib"
    return None


def _is_zlib(head: bytes) -> bool:
    """A raw zlib stream (red team 7, R7-4: what HTTP and pickle caches write): deflate (CM 8) with a
    window of at most 32 KiB, no preset dictionary, a valid header checksum, and a start that inflates.
    Two bytes are a weak signature ("x^" begins some text files): text that fails to inflate is read as
    text, never taken for a broken stream."""
    if len(head) < 2:
        return False
    cmf, flg = head[0], head[1]
    if cmf & 0x0F != 8 or cmf >> 4 > 7 or flg & 0x20 or (cmf << 8 | flg) % 31:
        return False
    try:
        zlib.decompressobj().decompress(head[:_PROBE], 1 << 16)
    except zlib.error:
        return False
    return True


class Inflated:
    """The inflated blocks of one compressed body, at most ``cap`` bytes, each at most ``block`` bytes.

    After iterating, ``cut`` says why the body was not read to its end (past the cap; for xz and bzip2 a
    stream that stops being valid or a second stream after the first), "" when it was. A gzip or zlib body
    that stops being valid just ends: what was inflated was read, and a file that only started like one
    is not listed as unscanned.
    """

    def __init__(self, name: str, compressed: Iterable[bytes], *, cap: int, block: int) -> None:
        self.name = name
        self.cut = ""
        self._compressed = compressed
        self._cap = cap
        self._block = block

    def __iter__(self) -> Iterator[bytes]:
        return self._zlib() if self.name in ("gzip", "zlib") else self._lzma()

    def _capped(self) -> str:
        return f"its {self.name} body was scanned only to {self._cap} bytes"

    def _zlib(self) -> Iterator[bytes]:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if self.name == "gzip" else zlib.MAX_WBITS)
        out = 0
        try:
            for chunk in self._compressed:
                while chunk and not inflater.eof:
                    room = self._cap - out
                    if room <= 0:
                        self.cut = self._capped()
                        return
                    piece = inflater.decompress(chunk, min(self._block, room))
                    out += len(piece)
                    if piece:
                        yield piece
                    chunk = inflater.unconsumed_tail
                if inflater.eof:
                    return
        except zlib.error:
            return  # not a stream after all, or cut short: what was inflated was read

    def _lzma(self) -> Iterator[bytes]:
        inflater = lzma.LZMADecompressor() if self.name == "xz" else bz2.BZ2Decompressor()
        out = 0
        try:
            rest = iter(self._compressed)
            for chunk in rest:
                while True:
                    if out >= self._cap:
                        self.cut = self._capped()
                        return
                    piece = inflater.decompress(chunk, min(self._block, self._cap - out))
                    chunk = b""  # the rest stays in the decompressor until it needs input
                    out += len(piece)
                    if piece:
                        yield piece
                    if inflater.eof:
                        # Concatenated streams (pbzip2 writes them): a key may be in a later one.
                        if inflater.unused_data.strip(b"\0") or any(c.strip(b"\0") for c in rest):
                            self.cut = f"only its first {self.name} stream was scanned"
                        return
                    if inflater.needs_input:
                        break
        except (lzma.LZMAError, OSError, EOFError, ValueError):
            self.cut = f"its {self.name} body could not be inflated to its end"
