"""Replay is the default and it is offline: no sockets, no credentials.

Only ``CASSETTE_MODE=record`` (``make record``) or ``passthrough`` may reach the network.
"""

from __future__ import annotations

import os
import re

import pytest
from pytest_socket import disable_socket, enable_socket

_CREDENTIAL = re.compile(
    r".*(_API_KEY|_TOKEN)$|^(OPENAI|ANTHROPIC)_(BASE_URL|ORG_ID|ORGANIZATION|PROJECT_ID)$"
)


def _replaying() -> bool:
    return os.environ.get("CASSETTE_MODE", "") in ("", "replay")


@pytest.fixture(autouse=True)
def _offline_replay(monkeypatch: pytest.MonkeyPatch):
    """In replay, every test runs with sockets blocked (event loops may still use Unix socketpairs)."""
    if not _replaying():
        yield
        return
    for name in list(os.environ):
        if _CREDENTIAL.match(name.upper()):
            monkeypatch.delenv(name)
    disable_socket(allow_unix_socket=True)
    try:
        yield
    finally:
        enable_socket()
