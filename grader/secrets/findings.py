"""The finding record shared by every scan: where a credential is, which rule, and only a redacted view."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from grader.secrets.redact import redact

__all__ = ["SecretFinding", "fingerprint", "make_finding"]

# Where a finding was seen; the check counts each kind separately.
KINDS = ("tree", "tape", "history", "output")


@dataclass(frozen=True)
class SecretFinding:
    """One credential. It never holds the secret itself: only a redacted prefix and a hash to dedupe on."""

    rule: str
    description: str
    kind: str  # one of KINDS
    path: str  # repo-relative file, or the label of a command output
    line: int
    redacted: str
    fingerprint: str  # sha256 prefix of the secret: equal secrets compare equal without being stored
    commit: str | None = None  # short sha of the commit that introduced it (history findings)
    encoding: str | None = None  # "gzip+base64" etc. when found inside an encoded body
    # The zip member it is in ("inner.zip:dev.env" one level down); the path stays the archive's, so the
    # history pass can relabel the archive without losing the member.
    member: str | None = None

    @property
    def location(self) -> str:
        """``file:line``, ``archive:member:line`` inside a zip, ``commit:``-prefixed for a history finding.
        Line 0 is the name itself (a key used as a file or member name)."""
        where = f"{self.path}:{self.member}:{self.line}" if self.member else f"{self.path}:{self.line}"
        return f"{self.commit}:{where}" if self.commit else where

    def render(self) -> str:
        """One line for a report: rule, location and the redacted secret."""
        inside = f" inside a {self.encoding} body" if self.encoding else ""
        return f"{self.rule} at {self.location} ({self.redacted}){inside}"


def fingerprint(secret: str) -> str:
    """A short, one-way id for a secret, enough to dedupe findings."""
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()[:16]


def make_finding(
    rule_id: str,
    description: str,
    secret: str,
    *,
    kind: str,
    path: str,
    line: int,
    commit: str | None = None,
    encoding: str | None = None,
) -> SecretFinding:
    """Build a finding from a raw secret, which is redacted here and then dropped."""
    return SecretFinding(
        rule=rule_id,
        description=description,
        kind=kind,
        path=path,
        line=line,
        redacted=redact(secret),
        fingerprint=fingerprint(secret),
        commit=commit,
        encoding=encoding,
    )
