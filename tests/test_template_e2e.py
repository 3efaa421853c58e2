"""End to end: bake, `make record` against the stand-in with a dummy key, then replay with no network."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.bake import bake, baked_venv, files_containing, run, standin

pytestmark = [pytest.mark.slow, pytest.mark.index]

DUMMY_KEY = "sk-e2e-dummy-7f3a9c21d4b8e6f0"
ENV_NAMES = {
    "openai-compatible": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}


@dataclass
class Recorded:
    project: Path
    provider: str
    record: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module", params=sorted(ENV_NAMES))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    provider = request.param
    project = bake(tmp_path_factory.mktemp(provider), project_name="E2E Triage", provider=provider)
    key_env, url_env = ENV_NAMES[provider]
    with standin() as url:
        base = url.removesuffix("/v1") if provider == "anthropic" else url
        env = baked_venv().env(**{key_env: DUMMY_KEY, url_env: base})
        result = run(["make", "record"], project, env)
    return Recorded(project, provider, result)


def _tapes(project: Path) -> list[Path]:
    return sorted((project / "cassettes").glob("*.json"))


def test_record_writes_one_tape_per_ticket_with_meta(recorded: Recorded) -> None:
    assert recorded.record.returncode == 0, recorded.record.stdout[-3000:] + recorded.record.stderr[-2000:]
    tickets = (recorded.project / "data/tickets.jsonl").read_text().splitlines()
    tapes = _tapes(recorded.project)
    assert len(tapes) == len(tickets)
    for path in tapes:
        tape = json.loads(path.read_text())
        assert tape["version"] == 1 and tape["key"] == path.stem
        meta = tape["meta"]
        assert meta["endpoint"] == "127.0.0.1"
        assert meta["provider"] == ("anthropic" if recorded.provider == "anthropic" else "openai")
        assert meta["model"] == tape["request"]["body"]["model"]
        assert meta["served_model"] and meta["recorded_at"].endswith("Z")


def test_the_key_is_nowhere(recorded: Recorded) -> None:
    assert files_containing(recorded.project, DUMMY_KEY) == []
    assert DUMMY_KEY not in recorded.record.stdout + recorded.record.stderr


def test_make_test_and_demo_replay_offline_without_a_key(recorded: Recorded) -> None:
    venv = baked_venv()
    test = run(["make", "test"], recorded.project, venv.env(), offline=True)
    assert test.returncode == 0, test.stdout[-3000:] + test.stderr[-2000:]
    assert " passed" in test.stdout and "failed" not in test.stdout

    demo = run(["make", "demo"], recorded.project, venv.env(), offline=True)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    tickets = len((recorded.project / "data/tickets.jsonl").read_text().splitlines())
    assert f"{tickets}/{tickets} agree with their labels" in demo.stdout


def test_a_deleted_tape_fails_loudly_by_key(recorded: Recorded, tmp_path: Path) -> None:
    venv = baked_venv()
    victim = _tapes(recorded.project)[0]
    saved = victim.read_bytes()
    victim.unlink()
    ledger = tmp_path / "misses.jsonl"
    try:
        # pytest-socket alone (no namespace): a connection attempt would show up as SocketBlockedError.
        result = run(["make", "test"], recorded.project, venv.env(CASSETTE_MISS_LOG=str(ledger)))
    finally:
        victim.write_bytes(saved)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "1 failed" in result.stdout
    assert f"no tape {victim.stem}" in output and "make record" in output
    assert "SocketBlockedError" not in output and "ConnectError" not in output
    assert [json.loads(line)["key"] for line in ledger.read_text().splitlines()] == [victim.stem]


def test_make_prune_removes_duplicates_and_keeps_used_tapes(recorded: Recorded) -> None:
    original = _tapes(recorded.project)
    duplicate = recorded.project / "cassettes" / "ffffffffffffffff.json"
    duplicate.write_bytes(original[0].read_bytes())
    result = run(["make", "-s", "prune"], recorded.project, baked_venv().env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"removed cassettes/{duplicate.name} (duplicate of {original[0].name})" in result.stdout
    assert _tapes(recorded.project) == original
