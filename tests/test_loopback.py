"""One loopback rule: the grader's `is_loopback` and the baked template's `make check` copy agree.

`make check` warns a candidate that tapes recorded against a loopback endpoint are capped by the default
rubric; the metadata row applies the cap with grader/loopback.py. If the two disagreed on a host, a candidate
would be capped without the warning (or warned for nothing).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from grader.loopback import is_loopback
from tests.helpers.bake import ROOT

_TEMPLATE_SELFCHECK = ROOT / "template" / "{{cookiecutter.project_slug}}" / "tools" / "selfcheck.py"
_SAMPLE_SELFCHECK = ROOT / "sample_solution" / "tools" / "selfcheck.py"

# 0.0.0.0 and :: are loopback on purpose: a connection to them reaches this machine, a local server prints
# them as the address it listens on, and no real model endpoint answers there (grader/loopback.py).
LOOPBACK = [
    "127.0.0.1",
    "127.4.5.6",
    "::1",
    "[::1]",
    "[::1]:8080",
    "localhost",
    "LOCALHOST",
    " localhost ",
    "api.localhost",
    "localhost:8000",
    "127.0.0.1:8000",
    "http://127.0.0.1:8000/v1",
    "::ffff:127.0.0.1",
    "0.0.0.0",  # noqa: S104 - a host to classify, never bound
    "::",
]
ELSEWHERE = [
    "api.openai.com",
    "api.anthropic.com",
    "https://api.openai.com/v1",
    "127.example.com",  # a name that merely starts like an address
    "localhost.example.com",
    "10.0.0.1",
    "192.168.1.20",
    "2001:db8::1",
    "",
    "[::1",  # half a bracket: not an address at all
]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and annotations look the module up while it loads
    # No __pycache__ beside the template's copy: every bake made afterwards would carry it.
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
        sys.dont_write_bytecode = writes
    return module


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ELSEWHERE)
def test_other_hosts(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize("path", [_TEMPLATE_SELFCHECK, _SAMPLE_SELFCHECK], ids=["template", "sample"])
def test_make_check_copy_agrees_with_the_grader(path: Path) -> None:
    selfcheck = _load(path, f"_selfcheck_under_test_{path.parent.parent.name.strip('{}.')}")
    answers = {host: (is_loopback(host), selfcheck._loopback(host)) for host in LOOPBACK + ELSEWHERE}
    assert {h: a for h, a in answers.items() if a[0] != a[1]} == {}


def test_none_is_not_loopback() -> None:
    assert not is_loopback(None)
