"""Redaction: the only form in which a secret ever leaves the scanner."""

from __future__ import annotations

__all__ = ["redact"]

_MAX_SHOWN = 8
_MARK = "…[redacted]"


def redact(secret: str) -> str:
    """Show at most the first 8 characters (fewer for short secrets), then ``…[redacted]``.

    A quarter of the secret at most is shown, so a short token never becomes guessable from its prefix.
    """
    shown = min(_MAX_SHOWN, len(secret) // 4)
    # Control characters or newlines would break the one-line report format.
    head = "".join(ch if ch.isprintable() else "?" for ch in secret[:shown])
    return f"{head}{_MARK}"
