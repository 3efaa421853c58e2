"""Which opens of a tape count as a replay (cassette-hygiene's "unused"): a test that reads every recording
(a lint of the tapes) is not a replay, a replay layer that preloads every tape is."""

from __future__ import annotations

from grader.checks.hygiene import _replay_opens
from grader.tapes import Tape

TAPES = [Tape(path=f"recordings/{i}.json", format="json") for i in range(6)]
ALL = {t.path for t in TAPES}


def _opened(sites: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for site, paths in sites.items():
        for path in paths:
            out.setdefault(path, set()).add(site)
    return out


def test_a_test_linting_every_tape_does_not_make_them_used() -> None:
    used = {"recordings/0.json", "recordings/1.json"}
    opened, left_out = _replay_opens(
        _opened({"tests/test_agent.py:49": ALL, "triage_agent/replay.py:49": used}), TAPES
    )
    assert opened == used
    assert left_out == ["tests/test_agent.py:49"]


def test_a_package_that_preloads_every_tape_uses_them_all() -> None:
    opened, left_out = _replay_opens(
        _opened({"triage_agent/replay.py:20": ALL, "tests/test_one.py:8": {"recordings/2.json"}}), TAPES
    )
    assert opened == ALL and left_out == []


def test_when_only_a_test_opened_tapes_it_is_the_replay() -> None:
    # A suite whose test reads each tape and replays it itself: nothing else to tell use apart.
    opened, left_out = _replay_opens(_opened({"tests/test_replay.py:12": ALL}), TAPES)
    assert opened == ALL and left_out == []
