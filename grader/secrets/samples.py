"""Synthetic rule samples: templates in the rule file expanded into deterministic pseudo-random keys.

The rule file holds templates such as ``sk-or-v1-{{hex:64}}`` instead of literal keys, so the kit's own
repository never carries a string that looks like a live credential, while the tests still exercise every
rule on realistic, high-entropy input.
"""

from __future__ import annotations

import hashlib
import re
import zlib

from grader.secrets.rules import Rule, base62

__all__ = ["ALPHABETS", "expand", "true_sample_matches"]

ALPHABETS = {
    "alnum": "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "alpha": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "lower": "abcdefghijklmnopqrstuvwxyz",
    "hex": "0123456789abcdef",
    "digits": "0123456789",
    "upper32": "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
    "b64url": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
    "b64": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    "bech32": "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L",  # age keys, upper case
}
_SLOT = re.compile(r"\{\{(?:(" + "|".join(ALPHABETS) + r"):(\d{1,3})|(github_crc32))\}\}")


class _Stream:
    """Deterministic characters from sha256(seed, counter): reproducible without the random module."""

    def __init__(self, seed: str) -> None:
        self._seed = seed.encode()
        self._counter = 0
        self._pool = b""

    def byte(self) -> int:
        if not self._pool:
            self._pool = hashlib.sha256(self._seed + self._counter.to_bytes(8, "big")).digest()
            self._counter += 1
        value, self._pool = self._pool[0], self._pool[1:]
        return value

    def choice(self, alphabet: str) -> str:
        # Rejection sampling keeps the distribution uniform for alphabets that do not divide 256.
        limit = 256 - 256 % len(alphabet)
        while True:
            value = self.byte()
            if value < limit:
                return alphabet[value % len(alphabet)]


def expand(template: str, seed: str) -> str:
    """Replace each ``{{alphabet:n}}`` slot with n pseudo-random characters; ``{{github_crc32}}`` with the
    base62 CRC32 of the slot just before it. Text without slots is returned unchanged."""
    stream = _Stream(seed)
    last = ""

    def fill(match: re.Match[str]) -> str:
        nonlocal last
        if match.group(3):
            return base62(zlib.crc32(last.encode()), 6)
        last = "".join(stream.choice(ALPHABETS[match.group(1)]) for _ in range(int(match.group(2))))
        return last

    return _SLOT.sub(fill, template)


def true_sample_matches(rule: Rule) -> list[bytes]:
    """Every match of ``rule``'s regex in its expanded true samples (lowercased for ``ignore_case``), for
    checks that a rule's gate literals can never hide one of its keys."""
    matches = []
    for i, template in enumerate(rule.true_samples):
        data = expand(template, f"{rule.id}:true:{i}").encode()
        matches += [m.group(0) for m in rule.compiled.finditer(data.lower() if rule.ignore_case else data)]
    return matches
