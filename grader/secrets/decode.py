"""Encoded bodies inside recordings: vcrpy ``!!binary`` blocks and gzip+base64 strings, decoded; and whole
files in another text encoding than UTF-8 (UTF-16/32, what Windows PowerShell's ``>`` writes), with JSON
``\\uXXXX`` escapes or URL percent-escapes (a form body), transcoded, so a key is found in the form anyone
who opens (or decodes) the file reads."""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import zlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

__all__ = [
    "MARKERS",
    "MAX_DECODED",
    "TEXT_ESCAPES",
    "Embedded",
    "base64_texts",
    "continuations_joined",
    "decompress",
    "embedded_bodies",
    "html_unescaped",
    "json_unescaped",
    "percent_decoded",
    "wide_text",
]

MAX_DECODED = 64 * 1024 * 1024  # a decompression bomb must not exhaust the grader's memory

# vcrpy writes `string: !!binary |` followed by indented base64 lines (gzip bodies are stored that way).
_YAML_BINARY = re.compile(
    rb"!!binary[ \t]*(?:\|[-+]?)?[ \t]*\r?\n((?:[ \t]+[A-Za-z0-9+/=]+[ \t]*(?:\r?\n|\Z))+)"
)
_YAML_BINARY_INLINE = re.compile(rb"!!binary[ \t]+[\"']?([A-Za-z0-9+/=]{16,})")
# Base64 of gzip always starts with H4sI; JSON writers may escape "/" as "\/" or wrap lines with "\n".
_GZIP_B64 = re.compile(rb"H4sI(?:[A-Za-z0-9+/=]|\\[n/])+")
_BINARY, _GZIP = b"!!binary", b"H4sI"
MARKERS = (_BINARY, _GZIP)  # no encoded body is looked for in data that holds neither


@dataclass(frozen=True)
class Embedded:
    """A decoded body found inside a larger text, and where it started."""

    start: int  # byte offset of the encoded text in the outer data
    data: bytes
    encoding: str  # e.g. "gzip+base64"


def decompress(data: bytes) -> tuple[bytes, str] | None:
    """Inflate gzip or zlib data (capped at MAX_DECODED); None when it is neither."""
    if data[:2] == b"\x1f\x8b":
        name, wbits = "gzip", 16 + zlib.MAX_WBITS
    elif len(data) > 1 and data[0] == 0x78 and (data[0] << 8 | data[1]) % 31 == 0:
        name, wbits = "zlib", zlib.MAX_WBITS
    else:
        return None
    try:
        return zlib.decompressobj(wbits).decompress(data, MAX_DECODED), name
    except zlib.error:
        return None


def _decode(encoded: bytes) -> tuple[bytes, str] | None:
    # translate() deletes line breaks and indentation at C speed; a regex sub was a tenth of the scan time.
    clean = encoded.replace(b"\\n", b"").replace(b"\\/", b"/").translate(None, b" \t\r\n")
    clean = clean[: len(clean) - len(clean) % 4] if b"=" not in clean else clean
    try:
        raw = base64.b64decode(clean, validate=False)
    except (binascii.Error, ValueError):
        return None
    inflated = decompress(raw)
    if inflated is not None:
        return inflated[0], f"{inflated[1]}+base64"
    return raw, "base64"


def embedded_bodies(data: bytes, *, markers: Collection[bytes] | None = None) -> Iterator[Embedded]:
    """Every decodable encoded body in ``data``: vcrpy binary blocks, then loose gzip+base64 strings.

    ``markers``: the MARKERS that occur in ``data``, when the caller has already searched for them.
    """
    covered: list[tuple[int, int]] = []
    if markers is None:
        markers = [m for m in MARKERS if m in data]
    if _BINARY in markers:
        for pattern in (_YAML_BINARY, _YAML_BINARY_INLINE):
            for match in pattern.finditer(data):
                decoded = _decode(match.group(1))
                covered.append(match.span(1))
                if decoded is not None:
                    yield Embedded(match.start(1), *decoded)
    if _GZIP in markers:
        for match in _GZIP_B64.finditer(data):
            if any(lo <= match.start() < hi for lo, hi in covered):
                continue
            decoded = _decode(match.group(0))
            # Only an actual gzip stream counts here: a random "H4sI" inside other base64 is noise.
            if decoded is not None and decoded[1].startswith("gzip"):
                yield Embedded(match.start(), *decoded)


# Longest BOM first: the UTF-32-LE BOM begins with the UTF-16-LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Only printable ASCII is unescaped: an escaped newline must not move the lines findings are reported at.
_JSON_ESCAPE = re.compile(rb"\\u00([2-7][0-9a-fA-F])")


def wide_text(data: bytes) -> tuple[bytes, str] | None:
    """(the text as UTF-8, its encoding) for UTF-16/32 text (with a BOM, or ASCII interleaved with NULs),
    None for anything else. Lines stay where they were."""
    wide = _wide_encoding(data)
    if wide is None:
        return None
    try:
        return data.decode(wide).encode("utf-8"), wide
    except UnicodeDecodeError:
        return None


def json_unescaped(data: bytes) -> bytes | None:
    """``data`` with JSON ``\\u00XX`` escapes of printable ASCII replaced by the character, or None when it
    has none. Lines stay where they were."""
    if b"\\u00" not in data:
        return None
    unescaped = _JSON_ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), data)
    return unescaped if unescaped != data else None


_PERCENT_ESCAPE = re.compile(rb"%([2-7][0-9a-fA-F])")


def percent_decoded(data: bytes) -> bytes | None:
    """``data`` with URL ``%XX`` escapes of printable ASCII replaced by the character (red team 13: an AWS
    secret in a form body, its ``/`` and ``+`` as ``%2F`` and ``%2B``), or None when it has none. Lines stay
    where they were."""
    if b"%" not in data:
        return None
    decoded = _PERCENT_ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), data)
    return decoded if decoded != data else None


# Numeric character references of printable ASCII, and the named ones a key's characters can take.
_HTML_ESCAPE = re.compile(rb"&(?:#([0-9]{2,3})|#[xX]([0-9a-fA-F]{2})|([a-zA-Z]{2,6}));")
_HTML_NAMED = {
    b"amp": b"&",
    b"quot": b'"',
    b"apos": b"'",
    b"lt": b"<",
    b"gt": b">",
    b"sol": b"/",
    b"plus": b"+",
    b"equals": b"=",
    b"colon": b":",
    b"period": b".",
    b"lowbar": b"_",
    b"hyphen": b"-",
    b"dash": b"-",
    b"tilde": b"~",
    b"num": b"#",
    b"percnt": b"%",
    b"excl": b"!",
    b"comma": b",",
    b"semi": b";",
}


def _html_char(match: re.Match[bytes]) -> bytes:
    decimal, hexadecimal, name = match.groups()
    if name is not None:
        return _HTML_NAMED.get(name.lower(), match.group(0))
    code = int(decimal) if decimal is not None else int(hexadecimal, 16)
    return bytes([code]) if 0x20 <= code < 0x7F else match.group(0)


def html_unescaped(data: bytes) -> bytes | None:
    """``data`` with HTML character references of printable ASCII (``&#115;``, ``&#x73;``, ``&sol;``)
    replaced by the character (a key written into a page or a notebook's HTML output as entities reads as
    the key in any browser), or None when it has none. Lines stay where they were."""
    if b"&" not in data:
        return None
    decoded = _HTML_ESCAPE.sub(_html_char, data)
    return decoded if decoded != data else None


# A backslash ending a line, with the next line's indentation.
_CONTINUATION = re.compile(rb"\\\r?\n[ \t]*")


def continuations_joined(data: bytes) -> bytes | None:
    """The lines of ``data`` continued by a backslash at their end, joined, the next line's indentation
    dropped (a TOML ``\"\"\"`` string, a YAML double-quoted scalar, a shell command and a C string read that
    way; red team 31 split a key over two lines so), or None when no line is continued. Every other line is
    left empty, so that only the joined lines are scanned again; each stays where it was, the line breaks
    taken out following it."""
    if b"\\\n" not in data and (b"\r" not in data or b"\\\r\n" not in data):
        return None
    out: list[bytes] = []
    pos = pending = 0  # pending: line breaks taken out of the line being joined
    done = 0  # where the text not yet written out (as line breaks only) starts
    for match in _CONTINUATION.finditer(data):
        if pending and -1 < (end := data.find(b"\n", pos, match.start())):
            out += [data[pos:end], b"\n" * pending]  # that joined line ended before this continuation
            pos, pending, done = end, 0, end
        if not pending:  # a new joined line starts at the start of this one
            start = data.rfind(b"\n", done, match.start()) + 1 or done
            out.append(b"\n" * data.count(b"\n", done, start))
            pos = start
        out.append(data[pos : match.start()])
        pos, pending = match.end(), pending + 1
    if pending:
        end = data.find(b"\n", pos)
        end = len(data) if end == -1 else end
        out += [data[pos:end], b"\n" * pending]
        done = end
    out.append(b"\n" * data.count(b"\n", done))
    return b"".join(out)


# Escapes that keep a text's lines where they were, each undone on its own (the forms readers undo).
TEXT_ESCAPES: tuple[tuple[Callable[[bytes], bytes | None], str], ...] = (
    (json_unescaped, "JSON-escaped"),
    (percent_decoded, "percent-encoded"),
    (html_unescaped, "HTML-escaped"),
    (continuations_joined, "continued over lines"),
)

# Base64 tokens are found as runs in a mask of the data (every base64 character one byte, the rest another):
# translate and find work at C speed, where a regex tried every offset (it doubled the tree scan's time).
_BASE64_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
_MASK = bytes(0x41 if b in _BASE64_CHARS else 0x20 for b in range(256))
_MIN_TOKEN = b"A" * 28  # base64 of the shortest key a rule finds, and then some
_PRINTABLE = bytes(range(0x20, 0x7F)) + b"\t\r\n"
_MAX_TOKEN = 64 * 1024  # a longer token is an image or an archive, not a credential written down


def base64_texts(data: bytes) -> Iterator[Embedded]:
    """Every base64 token in ``data`` whose decoded bytes are text (a Kubernetes Secret's ``data:`` value,
    a docker ``auth`` of ``user:key``, a Basic header: red team 31), with where it starts."""
    mask = data.translate(_MASK)
    start = mask.find(_MIN_TOKEN)
    while start != -1:
        end = mask.find(b" ", start)
        end = len(data) if end == -1 else end
        token = data[start:end]
        at, start = start, mask.find(_MIN_TOKEN, end)
        # Base64 of text mixes cases; a snake_case name, a lowercase path or an upper-case constant does not.
        if len(token) > _MAX_TOKEN or token.islower() or token.isupper():
            continue
        urlsafe = b"-" in token or b"_" in token
        if urlsafe and (b"+" in token or b"/" in token):
            continue
        altchars = b"-_" if urlsafe else None
        try:
            # The first 24 bytes say whether it is text; only then is the whole token decoded.
            if base64.b64decode(token[:32], altchars=altchars).translate(None, _PRINTABLE):
                continue
            raw = base64.b64decode(token + b"=" * (-len(token) % 4), altchars=altchars)
        except (binascii.Error, ValueError):
            continue
        if len(raw) >= 16 and not raw.translate(None, _PRINTABLE):
            yield Embedded(at, raw, "base64")


def _wide_encoding(data: bytes) -> str | None:
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    sample = data[:4096]
    if len(sample) < 16 or b"\0" not in sample:
        return None
    quarter = len(sample) // 4
    # UTF-32: three NULs in every four bytes, the character's byte first (LE) or last (BE).
    lanes = [sample[i::4].count(0) for i in range(4)]
    if lanes[0] < 0.05 * quarter and min(lanes[1:]) > 0.9 * quarter:
        return "utf-32-le"
    if lanes[3] < 0.05 * quarter and min(lanes[:3]) > 0.9 * quarter:
        return "utf-32-be"
    half = len(sample) // 2
    even, odd = sample[0::2].count(0), sample[1::2].count(0)
    # ASCII text in UTF-16 without a BOM: every other byte is NUL, the others almost never.
    if odd > 0.9 * half and even < 0.05 * half:
        return "utf-16-le"
    if even > 0.9 * half and odd < 0.05 * half:
        return "utf-16-be"
    return None
