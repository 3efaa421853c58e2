"""Partial replay and refresh folders, end to end in a baked repository against the real stand-in.

`CASSETTE_REPLAY_UNTIL=N` serves a process's first N model calls from the committed tapes and sends the rest
to the endpoint, recording them into `CASSETTE_DIR`; the count line it prints must match what the stand-in
received (its truth log: one line per answer sent). `make record CASSETTE_DIR=...` refreshes into a fresh
folder. Neither may change a byte of the committed tapes or of cassettes/CHAIN.log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.bake import bake, baked_venv, run, standin

pytestmark = [pytest.mark.slow, pytest.mark.index]

DUMMY_KEY = "sk-replay-until-dummy-5b1e09c3"
ENV_NAMES = {
    "openai-compatible": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}
COUNTS = re.compile(
    r"^model calls: (\d+) \((\d+) from tape, (\d+) live(?:, (\d+) missed)?\), first live call (\d+|none)$",
    re.MULTILINE,
)


@dataclass
class Baked:
    project: Path
    provider: str
    tickets: int
    tmp: Path  # the baked suite's own temporary folder: nothing shared with other pytest sessions

    def env(self, url: str | None = None, **extra: str) -> dict[str, str]:
        key_env, url_env = ENV_NAMES[self.provider]
        if url is not None:
            extra[url_env] = url.removesuffix("/v1") if self.provider == "anthropic" else url
        return baked_venv().env(**{key_env: DUMMY_KEY, "TMPDIR": str(self.tmp), **extra})


@pytest.fixture(scope="module", params=sorted(ENV_NAMES))
def baked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Baked:
    provider = request.param
    project = bake(tmp_path_factory.mktemp(provider), project_name="Refresh Triage", provider=provider)
    tickets = len((project / "data/tickets.jsonl").read_text(encoding="utf-8").splitlines())
    baked = Baked(project, provider, tickets, tmp_path_factory.mktemp(f"{provider}-tmp"))
    with standin() as url:
        result = run(["make", "record"], project, baked.env(url))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return baked


def _committed(project: Path) -> dict[str, bytes]:
    """Every file of the committed recording (tapes and CHAIN.log), byte for byte."""
    folder = project / "cassettes"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != ".misses.jsonl"}


def _answers(truth_log: Path) -> int:
    return len(truth_log.read_text(encoding="utf-8").splitlines()) if truth_log.exists() else 0


def _counts(stderr: str) -> tuple[int, int, int, int, str]:
    found = COUNTS.findall(stderr)
    assert len(found) == 1, f"expected one count line on stderr, got {found}: {stderr[-2000:]}"
    total, tape, live, missed, first = found[0]
    return int(total), int(tape), int(live), int(missed or 0), first


def _tape_keys(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.json")}


def test_make_record_into_a_fresh_folder_never_touches_the_recording(baked: Baked, tmp_path: Path) -> None:
    before = _committed(baked.project)
    assert "CHAIN.log" in before and len([name for name in before if name.endswith(".json")]) == baked.tickets
    refresh, truth = tmp_path / "refresh", tmp_path / "truth.jsonl"
    with standin("--profile", "baseline", "--truth-log", str(truth)) as url:
        result = run(["make", "record", f"CASSETTE_DIR={refresh}"], baked.project, baked.env(url))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert _answers(truth) == baked.tickets, "every ticket was asked live"
    assert not COUNTS.search(result.stderr), "no count line without CASSETTE_REPLAY_UNTIL"
    assert _committed(baked.project) == before
    assert _tape_keys(refresh) == _tape_keys(baked.project / "cassettes"), "same requests, same keys"

    # The refresh folder has its own chain; the committed one still verifies.
    env = baked_venv().env(TMPDIR=str(baked.tmp))
    mine = run(["make", "-s", "verify", f"CASSETTE_DIR={refresh}"], baked.project, env)
    assert mine.returncode == 0 and f"ok ({baked.tickets} tapes" in mine.stdout, mine.stdout + mine.stderr
    committed = run(["make", "-s", "verify"], baked.project, env)
    assert committed.returncode == 0 and f"ok ({baked.tickets} tapes" in committed.stdout

    # CASSETTE_DIR alone replays from that folder, offline and with no key.
    replay = run(["make", "test", f"CASSETTE_DIR={refresh}"], baked.project, env, offline=True)
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    empty = tmp_path / "empty"
    demo = run(["make", "demo", f"CASSETTE_DIR={empty}"], baked.project, env, offline=True)
    assert demo.returncode == 2 and f"(expected {empty}/" in demo.stderr, demo.stderr


def test_replay_until_counts_match_what_the_standin_received(baked: Baked, tmp_path: Path) -> None:
    before = _committed(baked.project)
    tickets, n = baked.tickets, baked.tickets // 3
    truth = tmp_path / "truth.jsonl"
    with standin("--profile", "baseline", "--truth-log", str(truth)) as url:
        # `make record`: the suite's calls 1..N from the committed tapes, the rest live into a new folder.
        partial = tmp_path / "partial"
        argv = ["make", "record", f"CASSETTE_DIR={partial}", f"CASSETTE_REPLAY_UNTIL={n}"]
        result = run(argv, baked.project, baked.env(url))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        assert _counts(result.stderr) == (tickets, n, tickets - n, 0, str(n + 1))
        assert _answers(truth) == tickets - n
        assert len(_tape_keys(partial)) == tickets - n
        assert _tape_keys(partial) < _tape_keys(baked.project / "cassettes")

        # The CLI, every call live (N=0): a plain record into the folder, with its count.
        everything = tmp_path / "everything"
        env = baked.env(url, CASSETTE_DIR=str(everything), CASSETTE_REPLAY_UNTIL="0")
        result = run(["python", "-m", "refresh_triage", "--file", "data/tickets.jsonl"], baked.project, env)
        assert result.returncode == 0, result.stderr[-2000:]
        assert _counts(result.stderr) == (tickets, 0, tickets, 0, "1")
        assert _answers(truth) == 2 * tickets - n

    # N beyond the last call: nothing goes live, so it works with no network and no key at all.
    env = baked.env(CASSETTE_DIR=str(tmp_path / "unused"), CASSETTE_REPLAY_UNTIL=str(tickets + 5))
    del env[ENV_NAMES[baked.provider][0]]
    result = run(["make", "demo"], baked.project, env, offline=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"{tickets}/{tickets} agree with their labels" in result.stdout
    assert _counts(result.stderr) == (tickets, tickets, 0, 0, "none")
    assert _answers(truth) == 2 * tickets - n
    assert not (tmp_path / "unused").exists()

    assert _committed(baked.project) == before, (
        "the committed tapes and CHAIN.log are byte-for-byte unchanged"
    )


def test_replay_until_without_a_separate_folder_is_refused_in_one_line(baked: Baked) -> None:
    before = _committed(baked.project)
    for folder, complaint in (
        ("", "CASSETTE_REPLAY_UNTIL=3 needs CASSETTE_DIR"),
        ("cassettes", "never overwritten"),
    ):
        env = baked.env(CASSETTE_REPLAY_UNTIL="3", CASSETTE_DIR=folder)
        result = run(["python", "-m", "refresh_triage", "--file", "data/tickets.jsonl"], baked.project, env)
        assert result.returncode == 1, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("triage: error: ValueError: ") and complaint in line
    assert _committed(baked.project) == before
