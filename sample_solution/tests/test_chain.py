"""The tape chain (cassettes/CHAIN.log): recording, pruning and re-recording append to it, and `verify`
names the tape when a copy of a tape or of the chain is vandalised.

A fake upstream (httpx.MockTransport) stands in for the model endpoint: these pass before `make record`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from support_triage_agent.cassette import (
    CHAIN_FILE,
    CassetteTransport,
    chain_written,
    key_for,
    main,
    prune,
    verify,
)

URL = "https://api.example.test/v1/chat/completions"


def _body(text: str) -> dict:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}], "temperature": 0}


class Upstream:
    def __init__(self, answer: str = "ok") -> None:
        self.answer = answer

    def __call__(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"model": "m", "choices": [{"message": {"content": self.answer}}]})


@pytest.fixture(autouse=True)
def _own_ledgers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASSETTE_MISS_LOG", str(tmp_path / "misses.jsonl"))
    monkeypatch.delenv("CASSETTE_USED_LOG", raising=False)


def _record(folder: Path, upstream: Upstream, *texts: str) -> None:
    transport = CassetteTransport(folder, mode="record", inner=httpx.MockTransport(upstream))
    with httpx.Client(transport=transport) as client:
        for text in texts:
            client.post(URL, json=_body(text)).raise_for_status()


def _chain(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / CHAIN_FILE).read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def tapes(tmp_path: Path) -> Path:
    """Three tapes recorded, one pruned as unused, one re-recorded with another answer."""
    folder = tmp_path / "tapes"
    _record(folder, Upstream("first"), "alpha", "beta", "gamma")
    used = tmp_path / "used.jsonl"
    keep = [key_for(_body(text), path="/v1/chat/completions") for text in ("alpha", "beta")]
    used.write_text("".join(json.dumps({"key": k}) + "\n" for k in keep))
    prune(folder, used)
    _record(folder, Upstream("second"), "alpha", "beta")
    return folder


def test_record_prune_and_rerecord_append_to_the_chain_and_it_verifies(
    tapes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = _chain(tapes)
    assert [e["op"] for e in entries] == ["record"] * 3 + ["prune"] + ["rerecord"] * 2
    recorded, pruned = {e["tape"]: e for e in entries[:3]}, entries[3]
    assert pruned["reason"] == "unused" and pruned["removed"] == recorded[pruned["tape"]]["sha256"]
    assert all(e["replaced"] for e in entries[4:]) and all(e["at"].endswith("Z") for e in entries)
    assert main(["verify", "--dir", str(tapes)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("ok (2 tapes, head ") and len(out.split("head ")[1].rstrip(")")) == 16

    # The same tape written again adds nothing.
    last = entries[-1]
    chain_written(tapes, last["tape"], last["sha256"])
    assert _chain(tapes) == entries
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verify(empty).problems == [] and verify(empty).head == "none"


def test_vandalised_copies_of_a_tape_and_of_the_chain_are_named(
    tapes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "vandalised"
    shutil.copytree(tapes, copy)
    victim, other = sorted(copy.glob("*.json"))
    text = victim.read_text(encoding="utf-8")
    assert text.count('"second"') == 1
    victim.write_text(text.replace('"second"', '"secund"'), encoding="utf-8")  # one character of the answer
    assert main(["verify", "--dir", str(copy)]) == 1
    err = capsys.readouterr().err
    assert f"{victim}:1: tape {victim.stem} was edited after it was recorded" in err
    assert verify(tapes).problems == []  # the original is untouched

    stray = copy / "0123456789abcdef.json"
    stray.write_bytes(other.read_bytes())
    other.unlink()
    problems = verify(copy).problems
    assert any(p.startswith(f"{stray}:1: tape {stray.stem} is not in the chain") for p in problems), problems
    assert any(f"names tape {other.stem}, which is missing" in p for p in problems), problems

    copy = tmp_path / "vandalised-chain"
    shutil.copytree(tapes, copy)
    lines = (copy / CHAIN_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    (copy / CHAIN_FILE).write_text("".join(lines[:1] + lines[2:]), encoding="utf-8")  # a line deleted
    assert verify(copy).problems[0] == (
        f"{copy / CHAIN_FILE}:2: does not follow the line before it (a line edited, removed or inserted); "
        f"tape {json.loads(lines[2])['tape']}"
    )

    last = json.loads(lines[-1])["tape"]
    (copy / CHAIN_FILE).write_text("".join(lines[:-1]), encoding="utf-8")  # the last line deleted
    [problem] = verify(copy).problems
    assert problem.startswith(f"{copy / (last + '.json')}:1: tape {last} was edited after it was recorded")

    (copy / CHAIN_FILE).unlink()
    [problem] = verify(copy).problems
    assert f"{copy / CHAIN_FILE}: missing" in problem
