"""Build small vcrpy-based submissions (no ``[tool.takehome]``) with genuinely recorded YAML cassettes.

Two flavours of the same triage agent (OpenAI chat-completions REST API over httpx):

- ``"recording"``: tests use pytest-recording (``@pytest.mark.vcr``, ``--record-mode=none`` in addopts,
  ``--strict-markers``), cassettes in ``tests/cassettes/<module>/<test>.yaml``. A missing cassette is loud.
- ``"vcr"``: tests use pytest-vcr (``@pytest.mark.vcr``, its default record mode ``once``), cassettes in
  ``tests/cassettes/<test>.yaml``. A missing cassette falls through to the network.

The cassettes are recorded at build time with vcrpy (the kit's venv) against the kit's stand-in model server:
the agent runs in a subprocess pointed at the stand-in with a fake key, the Authorization header is filtered,
and the request URI is rewritten to the public API host (what the agent calls when replaying). Nothing here
is hand-written YAML: the tapes are what vcrpy stored.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.bake import clean_env
from tests.helpers.git import GIT_ENV as _GIT_ENV

__all__ = ["FLAVOURS", "MESSAGES", "MODEL", "VcrSubmission", "build_vcr_submission"]

MODEL = "gpt-4o-mini"
PACKAGE = "ticket_triage"
# test name -> (message, expected intent); the stand-in's rules (grader/rules/standin.yaml) decide intents.
MESSAGES: dict[str, tuple[str, str]] = {
    "test_refund": ("I want my money back for order 1182", "refund"),
    "test_shipping": ("Where is my package? The tracking page is empty.", "shipping"),
    "test_login": ("I cannot log in to my account since yesterday", "account"),
}
FLAVOURS = ("recording", "vcr")


@dataclass(frozen=True)
class VcrSubmission:
    repo: Path
    flavour: str  # "recording" | "vcr"
    cassettes: tuple[Path, ...]  # repo-relative, as recorded
    client_file: str  # repo-relative path of the module that sends the request
    request_line: int  # 1-based line of the httpx call in client_file
    fake_key: str  # the key the recording used; must appear nowhere in the repo


_CLIENT = '''\
"""Classify a support ticket with the OpenAI chat-completions API."""

import json
import os

import httpx

DEFAULT_MODEL = "{model}"
SYSTEM = "Classify the ticket. Answer with JSON: {{\\"intent\\": ..., \\"needs_human\\": ...}}."


def triage(message: str) -> dict:
    base_url = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
    payload = {{
        "model": DEFAULT_MODEL,
        "temperature": 0,
        "messages": [{{"role": "system", "content": SYSTEM}}, {{"role": "user", "content": message}}],
    }}
    headers = {{"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "")}}
    response = httpx.post(base_url + "/chat/completions", json=payload, headers=headers, timeout=30)
    response.raise_for_status()
    return json.loads(response.json()["choices"][0]["message"]["content"])
'''

_TESTS = """\
import pytest

from {package}.client import triage

{tests}
"""

_TEST = """\
@pytest.mark.vcr
def {name}():
    assert triage({message!r})["intent"] == {intent!r}
"""

_CONFTEST_RECORDING = """\
import pytest


@pytest.fixture(scope="module")
def vcr_config():
    # The record mode is pinned in pyproject's addopts (--record-mode=none): the suite only ever replays.
    return {"filter_headers": ["authorization"]}
"""

_CONFTEST_VCR = """\
import pytest


@pytest.fixture(scope="module")
def vcr_config():
    return {{"filter_headers": [("authorization", "REDACTED")]{extra}}}
"""

_PYPROJECT = """\
[project]
name = "ticket-triage"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = ["httpx>=0.27"]

[project.optional-dependencies]
test = ["pytest>=8", "vcrpy>=6", "{plugin}"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["."]
addopts = "{addopts}"
"""

_README = """\
# ticket-triage

Classifies support tickets with the OpenAI chat-completions API. The tests replay recorded cassettes
({plugin}); re-record with a real key by deleting a cassette and running the suite{how}.
"""

# Runs in a subprocess with the kit's python and the submission on PYTHONPATH: records one cassette per test.
_RECORDER = """\
import sys
from urllib.parse import urlsplit

import vcr

from {package}.client import triage

PUBLIC = "https://api.openai.com"


def public_host(request):
    # Recorded against a stand-in server; stored under the public API host the agent calls by default.
    parts = urlsplit(request.uri)
    request.uri = PUBLIC + parts.path + ("?" + parts.query if parts.query else "")
    if "host" in request.headers:
        request.headers["host"] = urlsplit(PUBLIC).hostname
    return request


recorder = vcr.VCR(record_mode="all", filter_headers={filters}, before_record_request=public_host)
for path, message in zip(sys.argv[1::2], sys.argv[2::2]):
    with recorder.use_cassette(path) as cassette:
        triage(message)
    assert len(cassette) == 1, (path, len(cassette))
"""


def _git(repo: Path, *args: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), **_GIT_ENV}
    subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, timeout=60)


def _write(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def build_vcr_submission(
    dest: Path,
    flavour: str,
    base_url: str,
    *,
    record_mode: str | None = None,
    keep_authorization: bool = False,
) -> VcrSubmission:
    """Write the ``flavour`` submission at ``dest``, record its cassettes against ``base_url`` and commit.

    ``base_url`` is the stand-in's ``http://127.0.0.1:PORT/v1``. ``record_mode`` (pytest-vcr flavour only)
    is written into the suite's ``vcr_config``; ``keep_authorization`` records without the header filter,
    so the fake key lands in the cassettes (a leak to detect). Raises ``RuntimeError`` (with vcrpy's
    output) when recording fails.
    """
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {FLAVOURS}, not {flavour!r}")
    repo = dest
    repo.mkdir(parents=True)
    client = _CLIENT.format(model=MODEL)
    _write(repo, f"{PACKAGE}/__init__.py", "")
    _write(repo, f"{PACKAGE}/client.py", client)
    # No `python -m` entry point: these submissions replay in their test suite only. (A live-only CLI would
    # be probed as the brief's `python -m <pkg>` and reach the network on an unseen message: a silent
    # fallback the independent corpus covers, quicktriage.)
    tests = "\n\n".join(
        _TEST.format(name=name, message=message, intent=intent)
        for name, (message, intent) in MESSAGES.items()
    )
    _write(repo, "tests/__init__.py", "")
    _write(repo, "tests/test_triage.py", _TESTS.format(package=PACKAGE, tests=tests))
    if flavour == "recording":
        plugin, how = "pytest-recording", " with --record-mode=once"
        addopts = "--strict-markers --record-mode=none"
        _write(repo, "tests/conftest.py", _CONFTEST_RECORDING)
        cassettes = tuple(Path("tests/cassettes/test_triage") / f"{name}.yaml" for name in MESSAGES)
        filters = '["authorization"]'
    else:
        plugin, how, addopts = "pytest-vcr", "", "--strict-markers"
        extra = f', "record_mode": {record_mode!r}' if record_mode else ""
        _write(repo, "tests/conftest.py", _CONFTEST_VCR.format(extra=extra))
        cassettes = tuple(Path("tests/cassettes") / f"{name}.yaml" for name in MESSAGES)
        filters = '[("authorization", "REDACTED")]'
    _write(repo, "pyproject.toml", _PYPROJECT.format(plugin=plugin, addopts=addopts))
    _write(repo, "README.md", _README.format(plugin=plugin, how=how))
    _write(repo, ".gitignore", "__pycache__/\n.pytest_cache/\n")

    if keep_authorization:
        filters = "[]"
    fake_key = "sk-recording-" + os.urandom(12).hex()
    recorder = dest.parent / f".{dest.name}-record.py"
    recorder.write_text(_RECORDER.format(package=PACKAGE, filters=filters), encoding="utf-8")
    args: list[str] = []
    for rel, (message, _) in zip(cassettes, MESSAGES.values(), strict=True):
        args += [str(repo / rel), message]
    env = clean_env(OPENAI_BASE_URL=base_url, OPENAI_API_KEY=fake_key, PYTHONPATH=str(repo))
    done = subprocess.run(
        [sys.executable, str(recorder), *args], env=env, capture_output=True, text=True, timeout=120
    )
    recorder.unlink()
    if done.returncode != 0:
        raise RuntimeError(f"recording the {flavour} cassettes failed:\n{done.stderr[-3000:]}")
    for path in repo.rglob("__pycache__"):
        subprocess.run(["rm", "-rf", str(path)], check=True)

    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "commit.gpgsign=false", "commit", "-qm", f"triage agent with {plugin} cassettes")
    line = next(n for n, text in enumerate(client.splitlines(), 1) if "httpx.post(" in text)
    return VcrSubmission(
        repo=repo,
        flavour=flavour,
        cassettes=cassettes,
        client_file=f"{PACKAGE}/client.py",
        request_line=line,
        fake_key=fake_key,
    )
