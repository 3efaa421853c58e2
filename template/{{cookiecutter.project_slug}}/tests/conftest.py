"""Replay is the default and it is offline: no sockets, no credentials.

Only ``CASSETTE_MODE=record`` (``make record``), ``passthrough`` or ``CASSETTE_REPLAY_UNTIL`` (calls after
the first N go live) may reach the network. When tests miss tapes, the run ends with one line saying how many
and what most often differs from the nearest tape.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest
from pytest_socket import disable_socket, enable_socket

_PACKAGE = "{{ cookiecutter.package_name }}"
_DEFAULT_TAPES = Path(__file__).resolve().parent.parent / "cassettes"

_CREDENTIAL = re.compile(
    r".*(_API_KEY|_TOKEN)$|^(OPENAI|ANTHROPIC)_(BASE_URL|ORG_ID|ORGANIZATION|PROJECT_ID)$"
)


def _replaying() -> bool:
    if os.environ.get("CASSETTE_REPLAY_UNTIL"):
        return False
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


def _ledger() -> str:
    # Where the cassette layer writes it: CASSETTE_DIR (a refresh folder) replaces cassettes/.
    folder = os.environ.get("CASSETTE_DIR") or str(_DEFAULT_TAPES)
    return os.environ.get("CASSETTE_MISS_LOG") or os.path.join(folder, ".misses.jsonl")


def _ledger_size() -> int:
    try:
        return os.path.getsize(_ledger())
    except OSError:
        return 0


_MISSES_BEFORE = {"size": 0}


def pytest_sessionstart(session: pytest.Session) -> None:
    # The default ledger holds the misses of the last run only, so no stale line from an old run is read
    # as today's. A ledger CASSETTE_MISS_LOG names belongs to whoever named it (the grader reads its own):
    # it is appended to, never reset. Not in an xdist worker: it would erase its siblings' misses.
    if not os.environ.get("CASSETTE_MISS_LOG") and not os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            os.remove(_ledger())
        except OSError:
            pass  # none yet, or a read-only checkout (the ledger is a diagnostic; replay must still run)
    _MISSES_BEFORE["size"] = _ledger_size()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    # Around pytest's own summary, so this line comes after the list of failures, just before the totals.
    try:
        return (yield)
    finally:
        # Imported here, not at the top: a package that does not import must fail its own tests, not
        # this file (a conftest that cannot load stops the whole run).
        try:
            miss_summary = importlib.import_module(f"{_PACKAGE}.cassette").miss_summary
        except Exception:
            miss_summary = None
        line = miss_summary(_ledger(), _MISSES_BEFORE["size"]) if miss_summary else None
        if line:
            terminalreporter.write_line(line)
