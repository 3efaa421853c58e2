"""The tape chain (cassettes/CHAIN.jsonl): recording, pruning and re-recording append to it, and `verify`
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


def test_record_prune_and_rerecord_append_to_the_chain_and_it_verifies(tapes: Path) -> None:
    entries = _chain(tapes)
    assert [e["op"] for e in entries] == ["record"] * 3 + ["prune"] + ["rerecord"] * 2
    recorded, pruned = {e["tape"]: e for e in entries[:3]}, entries[3]
    assert pruned["reason"] == "unused" and pruned["removed"] == recorded[pruned["tape"]]["sha256"]
    assert all(e["replaced"] for e in entries[4:]) and all(e["at"].endswith("Z") for e in entries)
    verdict = verify(tapes)
    assert verdict.problems == [] and verdict.tapes == 2


def test_the_same_tape_written_again_adds_no_entry(tmp_path: Path) -> None:
    folder = tmp_path / "tapes"
    _record(folder, Upstream(), "alpha")
    [entry] = _chain(folder)
    chain_written(folder, entry["tape"], entry["sha256"])
    assert _chain(folder) == [entry]
    chain_written(folder, entry["tape"], "f" * 64)
    assert [e["op"] for e in _chain(folder)] == ["record", "rerecord"]


def test_verify_prints_ok_with_the_count_and_head(tapes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--dir", str(tapes)]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("ok (2 tapes, head ") and len(out.split("head ")[1].rstrip(")")) == 16


def test_a_one_character_edit_of_an_answer_is_named(
    tapes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "vandalised"
    shutil.copytree(tapes, copy)
    victim = sorted(copy.glob("*.json"))[0]
    text = victim.read_text(encoding="utf-8")
    assert text.count('"second"') == 1
    victim.write_text(text.replace('"second"', '"secund"'), encoding="utf-8")
    assert main(["verify", "--dir", str(copy)]) == 1
    err = capsys.readouterr().err
    assert f"{victim}:1: tape {victim.stem} was edited after it was recorded" in err
    assert verify(tapes).problems == []  # the original is untouched


def test_a_deleted_chain_line_is_named(tapes: Path, tmp_path: Path) -> None:
    copy = tmp_path / "vandalised"
    shutil.copytree(tapes, copy)
    lines = (copy / CHAIN_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    del lines[1]
    (copy / CHAIN_FILE).write_text("".join(lines), encoding="utf-8")
    problems = verify(copy).problems
    named = json.loads(lines[1])["tape"]
    assert problems[0] == (
        f"{copy / CHAIN_FILE}:2: does not follow the line before it (a line edited, removed or inserted); "
        f"tape {named}"
    )


def test_a_deleted_last_line_leaves_its_tape_unmatched(tapes: Path, tmp_path: Path) -> None:
    copy = tmp_path / "vandalised"
    shutil.copytree(tapes, copy)
    lines = (copy / CHAIN_FILE).read_text(encoding="utf-8").splitlines(keepends=True)
    last = json.loads(lines.pop())["tape"]
    (copy / CHAIN_FILE).write_text("".join(lines), encoding="utf-8")
    [problem] = verify(copy).problems
    assert problem.startswith(f"{copy / (last + '.json')}:1: tape {last} was edited after it was recorded")


def test_a_tape_outside_the_chain_and_an_entry_without_tape_are_named(tapes: Path, tmp_path: Path) -> None:
    copy = tmp_path / "vandalised"
    shutil.copytree(tapes, copy)
    first, second = sorted(copy.glob("*.json"))
    stray = copy / "0123456789abcdef.json"
    stray.write_bytes(first.read_bytes())
    second.unlink()
    problems = verify(copy).problems
    assert any(p.startswith(f"{stray}:1: tape {stray.stem} is not in the chain") for p in problems), problems
    assert any(f"names tape {second.stem}, which is missing" in p for p in problems), problems


def test_tapes_without_a_chain_fail_and_no_tapes_pass(tmp_path: Path) -> None:
    assert verify(tmp_path).problems == [] and verify(tmp_path).head == "none"
    (tmp_path / "0123456789abcdef.json").write_text("{}\n")
    [problem] = verify(tmp_path).problems
    assert f"{tmp_path / CHAIN_FILE}: missing" in problem
