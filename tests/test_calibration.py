"""The calibration corpus through the real `grade --selftest`: every known submission lands in its bands.

One full corpus run (a subprocess of the installed `grade`, default rubric) serves every per-case test; each
test then asserts what a reviewer would read in that case's report, independently of the corpus file's own
evidence patterns. A lenient rubric must make the selftest fail, naming the case.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grader.errors import BadInput
from grader.rubric import load_rubric
from grader.selftest import default_corpus_path, load_corpus
from tests.helpers.sample_marks import LOOPBACK_EVIDENCE, REHEARSAL, default_scores

ROOT = Path(__file__).resolve().parents[1]
GRADE = [sys.executable, "-m", "grader"]
SHIPPED = default_corpus_path()
CASE_IDS = [case.id for case in load_corpus(SHIPPED)]
_FULL_KEY = re.compile(r"sk-(?:proj|ant-api03)-[A-Za-z0-9_-]{30,}")

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def _selftest(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GRADE, "--selftest", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        cwd=ROOT,
        check=False,
    )


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path_factory.mktemp("selftest") / "verdicts.json"
    done = _selftest("--corpus", str(SHIPPED), "--json", str(out))
    assert out.is_file(), done.stderr
    return done, json.loads(out.read_text(encoding="utf-8"))


def _case(corpus_run: tuple[Any, dict], case_id: str) -> dict[str, Any]:
    return next(c for c in corpus_run[1]["cases"] if c["id"] == case_id)


def _row(case: dict[str, Any], row_id: str) -> dict[str, Any]:
    return next(r for r in case["rows"] if r["id"] == row_id)


def _text(row: dict[str, Any]) -> str:
    return "\n".join([row["evidence"], *row["details"]])


@pytest.mark.index
def test_selftest_with_the_default_rubric(corpus_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    done, data = corpus_run
    failing = {c["id"] for c in data["cases"] if not c["ok"]}
    assert not failing, done.stdout
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith(f"selftest: all {len(CASE_IDS)} cases in band")
    # One line per case and row, each saying ok or why not.
    rows = len(load_rubric().rows)
    assert sum(line.split(" ", 1)[0] in CASE_IDS for line in done.stdout.splitlines()) == rows * len(CASE_IDS)


@pytest.mark.index
def test_no_full_key_appears_in_any_output_or_verdict(
    corpus_run: tuple[subprocess.CompletedProcess[str], dict],
) -> None:
    done, data = corpus_run
    assert not _FULL_KEY.search(done.stdout + done.stderr + json.dumps(data))


@pytest.mark.index
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_case_lands_in_its_bands(corpus_run: tuple[Any, dict], case_id: str) -> None:
    case = _case(corpus_run, case_id)
    assert case["error"] is None
    wrong = [f"{r['id']}: {'; '.join(r['problems'])}" for r in case["rows"] if not r["ok"]]
    assert not wrong, wrong


@pytest.mark.index
@pytest.mark.parametrize("case_id", ["sample-shipped", "clean-copy"])
def test_clean_submissions_score_the_samples_marks(corpus_run: tuple[Any, dict], case_id: str) -> None:
    """Under the default rubric: every row at the top but model-metadata, 2, because the sample's tapes came
    from the stand-in (tests/helpers/sample_marks.py)."""
    case = _case(corpus_run, case_id)
    assert {r["id"]: r["score"] for r in case["rows"]} == default_scores()
    assert f"all 24 {LOOPBACK_EVIDENCE}" in _row(case, "model-metadata")["evidence"]
    assert "the canary record probe found no leak" in _row(case, "no-credentials")["evidence"]


@pytest.mark.index
def test_the_rehearsal_rubric_gives_the_shipped_sample_full_marks(tmp_path: Path) -> None:
    out = tmp_path / "verdicts.json"
    done = _selftest("--rubric", str(REHEARSAL), "--case", "sample-shipped", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    (case,) = json.loads(out.read_text(encoding="utf-8"))["cases"]
    assert {r["score"] for r in case["rows"]} == {3}, case["rows"]
    assert f"all 24 {LOOPBACK_EVIDENCE}" in _row(case, "model-metadata")["evidence"]


@pytest.mark.index
def test_a_leaked_header_costs_credentials_and_hygiene_at_its_line(corpus_run: tuple[Any, dict]) -> None:
    case = _case(corpus_run, "leaked-header")
    where = f"{case['planted']['file']}:{case['planted']['line']}"
    assert re.fullmatch(r"cassettes/[0-9a-f]{16}\.json:\d+", where)
    creds, hygiene = _row(case, "no-credentials"), _row(case, "cassette-hygiene")
    assert creds["score"] == 0 and where in _text(creds) and "[redacted]" in _text(creds)
    assert hygiene["score"] <= 1 and f"{where} credential header 'authorization'" in _text(hygiene)


@pytest.mark.index
def test_a_key_only_in_history_is_found_at_the_commit_that_added_it(corpus_run: tuple[Any, dict]) -> None:
    case = _case(corpus_run, "key-in-history")
    commit = case["planted"]["commit"]
    assert re.fullmatch(r"[0-9a-f]{7}", commit)
    creds = _row(case, "no-credentials")
    assert creds["score"] == 0
    assert f"{commit}:.env:1" in _text(creds) and "in git history" in _text(creds)


@pytest.mark.index
def test_a_key_in_source_is_found_at_its_file_and_line(corpus_run: tuple[Any, dict]) -> None:
    case = _case(corpus_run, "key-in-source")
    creds = _row(case, "no-credentials")
    assert creds["score"] == 0
    assert f"support_triage_agent/client.py:{case['planted']['line']}" in creds["evidence"]


@pytest.mark.index
def test_a_silent_cassette_miss_fallback_is_named(corpus_run: tuple[Any, dict]) -> None:
    case = _case(corpus_run, "silent-fallback")
    loud = _row(case, "loud-miss")
    assert loud["score"] <= 1
    assert f"support_triage_agent/agent.py:{case['planted']['line']}: `except CassetteMiss`" in _text(loud)
    # The template's tests/test_serve.py triages an unseen message and wants the 422: the one test that fails.
    replay = _row(case, "offline-replay")
    assert replay["score"] == 2 and "test_serve.py" in _text(replay)


@pytest.mark.index
def test_tapes_without_metadata_lose_the_metadata_row(corpus_run: tuple[Any, dict]) -> None:
    row = _row(_case(corpus_run, "tapes-without-metadata"), "model-metadata")
    assert "0/24 an endpoint" in row["evidence"] and "0/24 a recording time" in row["evidence"]
    assert row["score"] < 3


@pytest.mark.index
def test_unused_and_duplicate_tapes_are_counted(corpus_run: tuple[Any, dict]) -> None:
    row = _row(_case(corpus_run, "unused-and-duplicate-tapes"), "cassette-hygiene")
    assert row["score"] <= 1
    unused = int(re.search(r"(\d+) unused", row["evidence"]).group(1))  # type: ignore[union-attr]
    assert unused >= 300 and "5 duplicates" in row["evidence"]


@pytest.mark.index
def test_a_hand_edited_tape_is_a_key_mismatch_at_its_file(corpus_run: tuple[Any, dict]) -> None:
    case = _case(corpus_run, "hand-edited-tape")
    row = _row(case, "canonical-keys")
    assert row["score"] <= 1
    assert f"{case['planted']['file']}:{case['planted']['line']}" in _text(row) and "re-hashes" in _text(row)


@pytest.mark.index
def test_no_replay_doc_scores_zero(corpus_run: tuple[Any, dict]) -> None:
    row = _row(_case(corpus_run, "no-replay-doc"), "replay-doc")
    assert row["score"] == 0 and "no REPLAY.md" in _text(row)


@pytest.mark.index
def test_a_key_logged_while_recording_is_a_canary_leak(corpus_run: tuple[Any, dict]) -> None:
    case = _case(corpus_run, "key-logged-when-recording")
    creds = _row(case, "no-credentials")
    assert creds["score"] == 0
    assert creds["evidence"].startswith(
        "1 canary leak: recording wrote or printed the key it was given (record.log:1)"
    )
    assert any(d.startswith("canary leak: record.log:1 ") for d in creds["details"])


@pytest.mark.index
def test_a_lenient_rubric_fails_the_selftest_naming_the_case(tmp_path: Path) -> None:
    rubric = yaml.safe_load((ROOT / "rubric" / "default.yaml").read_text(encoding="utf-8"))
    row = next(r for r in rubric["rows"] if r["id"] == "no-credentials")
    row["levels"][3] = "true"  # every submission "has no credentials"
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(yaml.safe_dump(rubric, sort_keys=False), encoding="utf-8")
    done = _selftest("--rubric", str(lenient), "--case", "key-in-source")
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "selftest: FAILED 1 of 1 cases: key-in-source (no-credentials)"
    bad = next(line for line in lines if line.startswith("key-in-source no-credentials: "))
    assert "OUT OF BAND: expected [0, 0], got 3" in bad
    # Only the lenient row fails: the other rows of the same case are still judged, and are fine.
    assert "key-in-source offline-replay: ok (3 in [2, 3])" in lines


def test_bad_selftest_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    unknown = _selftest("--case", "no-such-case", timeout=60)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().startswith("grade: error: no calibration case named no-such-case;")
    assert len(unknown.stderr.strip().splitlines()) == 1
    broken = tmp_path / "rubric.yaml"
    broken.write_text("version: 1\nname: x\nrows: [\n", encoding="utf-8")
    bad_rubric = _selftest("--rubric", str(broken), timeout=60)
    assert bad_rubric.returncode == 2 and "Traceback" not in bad_rubric.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cases: []\n", "expected 'version: 1'"),
        ("version: 1\ncases:\n  - {id: x, base: elsewhere}\n", "'base' must be one of"),
        ("version: 1\ncases:\n  - {id: x, base: sample, steps: [{op: nope}]}\n", "needs 'op', one of"),
        ("version: 1\ncases:\n  - {id: x, base: sample, expect: {loud-miss: [3, 1]}}\n", "low <= high"),
        ("version: 1\ncases:\n  - {id: x, base: sample}\n  - {id: x, base: sample}\n", "duplicate case id"),
        ("version: 1\ncases:\n  - {id: x, base: sample, expect: {model-drift: manul}}\n", "or 'manual'"),
    ],
)
def test_a_malformed_corpus_is_bad_input(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "corpus.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BadInput, match=re.escape(message)):
        load_corpus(path)


@pytest.mark.index
def test_an_answer_edited_after_recording_caps_offline_replay_naming_both_commits(
    corpus_run: tuple[Any, dict],
) -> None:
    case = _case(corpus_run, "edited-answer")
    row = _row(case, "offline-replay")
    planted = case["planted"]
    assert row["score"] is not None and row["score"] <= 2
    assert planted["file"] in row["evidence"]
    assert planted["commit"] in row["evidence"] and planted["before"] in row["evidence"]


def test_a_manual_band_holds_only_a_row_left_to_a_reviewer(tmp_path: Path) -> None:
    from grader.selftest.runner import _judge

    path = tmp_path / "corpus.yaml"
    path.write_text("version: 1\ncases:\n  - {id: x, base: sample, expect: {model-drift: manual}}\n")
    case = load_corpus(path)[0]
    left = {"rows": [{"id": "model-drift", "status": "manual", "score": None, "evidence": "no call reached"}]}
    scored = {"rows": [{"id": "model-drift", "status": "scored", "score": 3, "evidence": "5 drifted"}]}
    (ok,) = _judge(case, left, {})
    assert ok.ok and ok.line("x") == "x model-drift: ok (manual, as its reviewers expect)"
    (out,) = _judge(case, scored, {})
    assert out.problems == ["OUT OF BAND: expected manual (left to a reviewer), got 3"]


def test_a_known_gap_is_reported_while_out_of_band_and_fails_once_closed(tmp_path: Path) -> None:
    from grader.selftest.runner import _judge

    path = tmp_path / "corpus.yaml"
    path.write_text(
        "version: 1\ncases:\n  - id: x\n    base: sample\n    expect: {model-drift: [3, 3]}\n"
        "    known_gaps: {model-drift: its live switch is a flag}\n"
    )
    case = load_corpus(path)[0]
    left = {"rows": [{"id": "model-drift", "status": "manual", "score": None, "evidence": "no call"}]}
    (gap,) = _judge(case, left, {})
    assert gap.ok and gap.line("x") == (
        "x model-drift: known gap (manual; its reviewers' band differs): its live switch is a flag"
    )
    closed = {"rows": [{"id": "model-drift", "status": "scored", "score": 3, "evidence": "5 drifted"}]}
    (now,) = _judge(case, closed, {})
    assert not now.ok and now.problems == [
        "KNOWN GAP CLOSED: the row is in band now; remove it from known_gaps"
    ]
