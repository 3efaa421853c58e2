"""The template's fast tape reader serves what every JSON reader of the tape sees (red team 25, F2).

Replay cuts the response out of a tape laid out by ``record`` instead of parsing the whole file. A later
commit added a second, nested ``response`` block whose key line was indented like a top-level one (JSON
ignores indentation): the cut served the nested copy, a label the tape's real response does not hold, while
the tape history, ``json.load`` and ``make verify`` all read the original."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "sample_solution"


@pytest.fixture(scope="module")
def layer() -> ModuleType:
    sys.path.insert(0, str(SAMPLE))
    try:
        spec = importlib.util.spec_from_file_location(
            "_sample_cassette", SAMPLE / "support_triage_agent" / "cassette.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SAMPLE))


def _tape() -> tuple[bytes, dict]:
    path = sorted((SAMPLE / "cassettes").glob("*.json"))[0]
    raw = path.read_bytes()
    return raw, json.loads(raw)


def _served(layer: ModuleType, raw: bytes) -> bytes:
    reply = layer._stored_json_reply(raw) or layer._reply_from(layer._stored_response(raw))
    return reply.content


def test_a_tape_as_recorded_is_served_from_the_cut(layer: ModuleType) -> None:
    raw, tape = _tape()
    assert layer._stored_json_reply(raw) is not None  # the fast path still applies to a recorded tape
    assert json.loads(_served(layer, raw)) == tape["response"]["body"]


@pytest.mark.parametrize("where", ["after", "inside"])
def test_a_nested_response_laid_out_as_top_level_is_not_served(layer: ModuleType, where: str) -> None:
    raw, tape = _tape()
    forged = json.loads(json.dumps(tape["response"]))
    forged["body"] = {"forged": True}
    nested = json.dumps({"response": forged}, indent=2, sort_keys=True)  # its key line: two spaces
    text = raw.decode("utf-8").rstrip("\n")
    if where == "after":  # a later top-level key holding the copy
        text = text[: -len("\n}")] + ',\n  "zz_review": ' + nested + "\n}\n"
    else:  # inside the meta block, before the real response
        text = text.replace('  "meta": {\n', '  "meta": {\n    "review": ' + nested + ",\n", 1)
    edited = text.encode("utf-8")
    assert json.loads(edited)["response"] == tape["response"]  # what every JSON reader sees
    assert edited.count(b'\n  "response": ') == 2

    assert json.loads(_served(layer, edited)) == tape["response"]["body"]
