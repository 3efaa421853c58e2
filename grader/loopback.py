"""One answer to "does this host stay on this machine?", for every place the grader asks it.

Asked of a tape's endpoint (the metadata row's loopback cap), of the hosts a sandboxed run connected to (the
serve probe's outbound list) and of a drift arm's URL (plain http is refused unless it stays here). The baked
template's ``tools/selfcheck.py`` cannot import the grader and keeps a copy of this rule;
tests/test_loopback.py feeds both the same hosts.

The unspecified addresses (0.0.0.0, ``::``) count as loopback: a connection to them reaches this machine
(Linux, macOS), a local server prints them as the address it listens on, and no real model endpoint answers
there.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["is_loopback"]


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names this machine: ``localhost`` and the names under ``.localhost`` (RFC 6761),
    127.0.0.0/8, ``::1`` (IPv4-mapped forms too) and the unspecified addresses. ``host`` may be a name or an
    address, IPv6 bracketed or not, with a port, or a whole URL; case and surrounding blanks do not matter."""
    text = (host or "").strip().lower()
    try:
        address = ipaddress.ip_address(text[1:-1] if text[:1] == "[" and text[-1:] == "]" else text)
    except ValueError:
        try:
            name = urlsplit(text if "://" in text else f"//{text}").hostname or ""
        except ValueError:  # a malformed bracketed address
            return False
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return name == "localhost" or name.endswith(".localhost")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback or address.ipv4_mapped.is_unspecified
    return address.is_loopback or address.is_unspecified
