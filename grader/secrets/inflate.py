"""Compressed bodies known by their first bytes (gzip, zlib, xz, bzip2), inflated block by block to a cap.

One copy for both readers of compressed files: the secret scan (grader/secrets/tree.py) and the canary
record probe (grader/checks/canary.py).
"""

from __future__ import annotations

import bz2
import lzma
import re
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator

__all__ = ["LAYERS", "ZIP_CENTRAL", "ZIP_LOCAL", "ZIP_MEMBER_ERRORS", "Inflated", "compression", "embedded"]

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
# Where a stream may start inside another file (red team 26, F2: a key in a PDF's FlateDecode stream and in
# a PNG's zTXt chunk): a zlib header at one of the four levels' FLG bytes, or a gzip member's magic and
# method. A false start in other binary data fails within a few bytes.
_EMBEDDED = re.compile(rb"\x78[\x01\x5e\x9c\xda]|\x1f\x8b\x08")
_PNG = b"\x89PNG\r\n\x1a\n"
_MIN_EMBEDDED = 8  # inflated bytes below which a "stream" is taken for noise
# Compressions of one body undone, a .gz.gz.gz at most (red team 26: a `.log.gz.gz` was read as binary).
LAYERS = 3


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


def embedded(data: bytes, *, cap: int, start: int = 0) -> Iterator[tuple[int, str, bytes]]:
    """(offset, "zlib" or "gzip", inflated bytes) of each compressed stream inside ``data`` starting at or
    after ``start``: a PDF's FlateDecode streams, a gzip member inside a tar, zlib data a container wrote;
    in a PNG only its compressed text chunks (zTXt, iTXt), not its pixels. Each stream is inflated to what
    is left of ``cap`` (shared by all of them); a stream that stops being valid yields what it gave, and
    the search goes on after the end of each stream that inflated to its end."""
    view = memoryview(data)
    offsets = _png_text(data) if data.startswith(_PNG) else _starts(data, start)
    resume = 0
    for off in offsets:
        if off < max(start, resume):
            continue
        if cap <= 0:
            return
        name = "gzip" if data[off] == 0x1F else "zlib"
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if name == "gzip" else zlib.MAX_WBITS)
        try:
            body = inflater.decompress(view[off:], cap)
        except zlib.error:
            continue
        if inflater.eof:
            resume = len(data) - len(inflater.unused_data)
        if len(body) >= _MIN_EMBEDDED:
            cap -= len(body)
            yield off, name, body


def _starts(data: bytes, start: int) -> Iterator[int]:
    for match in _EMBEDDED.finditer(data, start):
        yield match.start()


def _png_text(data: bytes) -> Iterator[int]:
    """Offsets of the compressed text in a PNG's zTXt chunks and compressed iTXt chunks, in file order."""
    at = len(_PNG)
    while at + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, at)
        body = at + 8
        end = min(body + length, len(data))
        keyword = data.find(b"\0", body, end)
        if kind == b"zTXt" and keyword >= 0:
            yield keyword + 2  # after the keyword's NUL and the compression method
        elif kind == b"iTXt" and keyword >= 0 and data[keyword + 1 : keyword + 2] == b"\x01":
            language = data.find(b"\0", keyword + 3, end)
            translated = data.find(b"\0", language + 1, end) if language >= 0 else -1
            if translated >= 0:
                yield translated + 1
        at = body + length + 4  # the chunk's CRC
