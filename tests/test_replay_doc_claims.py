"""replay-doc holds REPLAY.md's endpoint host and recording date to the tapes' own metadata (red-team G10).

The sample's tapes were recorded against the kit's stand-in (127.0.0.1); a REPLAY.md over them that claims
the production host, or another day, is a contradiction cited at its line. Honest documents (both hosts
named, a model snapshot date with no recording date, another recorder's tapes) are not. Two real grades of
the sample with a lying REPLAY.md; the rest calls the check.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import date, timedelta
from pathlib import Path

import pytest
import yaml

from grader.checks.replay_claims import claimed_dates, claimed_hosts
from grader.checks.replay_doc import replay_doc
from grader.grading import grade
from grader.rubric import load_rubric, score
from tests.helpers.context import folder_context

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_solution"
_DOC = (SAMPLE / "REPLAY.md").read_text(encoding="utf-8")
_TAPE_DAY = date.fromisoformat(
    json.loads(sorted((SAMPLE / "cassettes").glob("*.json"))[0].read_text())["meta"]["recorded_at"][:10]
)
# The sample's honest host paragraph (the stand-in named, api.openai.com named as what it is not).
_HOST_PARAGRAPH = _DOC[_DOC.index("- Endpoint host:") : _DOC.index("## Recording date")].rstrip("\n")
_LIE_HOST = "- Endpoint host: api.openai.com (the production OpenAI API, recorded with my own key)"
_DATE_LINE = next(line for line in _DOC.splitlines() if line.startswith(_TAPE_DAY.isoformat()))
_LIE_DATE = "All tapes were recorded on 2025-03-14 (UTC), by `make record`."


def _lying_about_host() -> str:
    return _DOC.replace(_HOST_PARAGRAPH, _LIE_HOST, 1)


def _lying_about_date() -> str:
    return _DOC.replace(_DATE_LINE, _LIE_DATE, 1)


def _line(doc: str, needle: str) -> int:
    return next(n for n, line in enumerate(doc.splitlines(), 1) if needle in line)


def _sample_with(tmp_path: Path, doc: str) -> Path:
    """The sample's tapes with ``doc`` as its REPLAY.md."""
    shutil.copytree(SAMPLE / "cassettes", tmp_path / "cassettes")
    (tmp_path / "REPLAY.md").write_text(doc, encoding="utf-8")
    return tmp_path


def _row(result):  # type: ignore[no-untyped-def]
    rubric = load_rubric()
    return next(r for r in score(rubric, {"replay-doc": result}) if r.id == "replay-doc"), rubric


def _contradictions(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        f"{f.location} {f.message}" for f in result.findings if not f.message.startswith("does not cover")
    ]


# ---------------------------------------------------------------------------------------- the check alone


def test_a_doc_naming_the_production_host_over_stand_in_tapes_is_a_contradiction(tmp_path: Path) -> None:
    doc = _lying_about_host()
    result = replay_doc(folder_context(_sample_with(tmp_path, doc)))
    (found,) = _contradictions(result)
    assert found.startswith(f"REPLAY.md:{_line(doc, _LIE_HOST)} names endpoint host api.openai.com, ")
    assert "but the tapes were recorded against 127.0.0.1 (e.g. cassettes/" in found
    assert found.endswith(", meta.endpoint)")
    row, rubric = _row(result)
    assert row.score is not None and row.score < rubric.max


def test_a_doc_giving_another_recording_date_is_a_contradiction(tmp_path: Path) -> None:
    doc = _lying_about_date()
    result = replay_doc(folder_context(_sample_with(tmp_path, doc)))
    (found,) = _contradictions(result)
    assert found == (
        f"REPLAY.md:{_line(doc, _LIE_DATE)} says the tapes were recorded on 2025-03-14, but they were "
        f"recorded on {_TAPE_DAY.isoformat()} (e.g. {found.split('(e.g. ', 1)[1]}"
    )
    assert found.endswith(", meta.recorded_at)")
    row, rubric = _row(result)
    assert row.score is not None and row.score < rubric.max


@pytest.mark.parametrize(
    ("what", "doc"),
    [
        ("the sample as shipped: the stand-in named, api.openai.com as what it is not", _DOC),
        (
            "both the stand-in and the production host named",
            _DOC.replace(
                _HOST_PARAGRAPH,
                "- Endpoint host: api.openai.com in production; these tapes came from a local stand-in at "
                "http://127.0.0.1:8000 speaking its wire format",
                1,
            ),
        ),
        (
            "a model snapshot date and an API version, no recording date",
            _DOC.replace(
                _DATE_LINE, "The tapes hold `gpt-4o-mini-2024-07-18` (`anthropic-version: 2023-06-01`).", 1
            ),
        ),
        (
            "the day before, in words (a time zone away)",
            _DOC.replace(
                _DATE_LINE, f"Recorded on {(_TAPE_DAY - timedelta(days=1)):%d %B %Y}, late evening.", 1
            ),
        ),
        (
            "localhost for the recording, 127.0.0.1 on the tapes: one machine",
            _DOC.replace(_HOST_PARAGRAPH, "- Endpoint host: recorded against http://localhost:8000/v1", 1),
        ),
        (
            "hosts only as examples, in code or unrelated",
            _DOC.replace(
                _HOST_PARAGRAPH,
                "- Endpoint host: the stand-in (point `OPENAI_BASE_URL` at any compatible server, e.g. "
                "api.openai.com)\n\n```sh\nOPENAI_BASE_URL=https://api.openai.com/v1 make record\n```\n\n"
                "The docs of the wire format live at https://platform.openai.com/docs.",
                1,
            ),
        ),
    ],
)
def test_an_honest_doc_contradicts_nothing(tmp_path: Path, what: str, doc: str) -> None:
    assert doc != _DOC or what.startswith("the sample as shipped")
    result = replay_doc(folder_context(_sample_with(tmp_path, doc)))
    assert _contradictions(result) == [], what
    assert result.facts["contradictions"] == 0


def test_what_counts_as_a_host_or_date_claim() -> None:
    lines = [
        (1, "Endpoint: POST https://api.anthropic.com/v1/messages", "The recording"),
        (2, "`make serve` listens on localhost:8080 for the demo page", "Serving"),
        (3, "Served model: claude-haiku-4-5-20251001, `anthropic-version: 2023-06-01`", "The recording"),
        (4, "- Date: 2026-12-01 (13:57 UTC)", "Recorded against"),
        (5, "2026-11-30", "When these tapes were made"),
        (6, "Last edited 2026-10-01, see https://docs.python.org/3/", "Notes"),
        (7, "not against api.openai.com, nor 127.0.0.1", "Endpoint"),
        (8, "Taped | Nov 29, 2026", "Recording notes"),
        (9, "Recorded 3/12/2026 and again in December 2026", "History"),
        (10, "`make serve`: a replay-only endpoint on `127.0.0.1:8787`", "Endpoint and model"),
    ]
    assert claimed_hosts(lines) == [(1, "api.anthropic.com")]
    days = {number: (shown, spans) for number, shown, spans in claimed_dates(lines)}
    assert sorted(days) == [4, 5, 8, 9]
    assert days[4][1] == [(date(2026, 12, 1), date(2026, 12, 1))]
    assert days[8][1] == [(date(2026, 11, 29), date(2026, 11, 29))]
    # 3/12/2026 is read both ways; a month alone is the whole month.
    spans = [span for number, _, s in claimed_dates(lines) if number == 9 for span in s]
    assert (date(2026, 12, 3), date(2026, 12, 3)) in spans and (date(2026, 3, 12), date(2026, 3, 12)) in spans
    assert (date(2026, 12, 1), date(2026, 12, 31)) in spans


def _vcr_cassette(folder: Path, *, host: str, day: str) -> None:
    """A vcrpy cassette as another recorder writes it: the host only in the URI, the time only in `date`."""
    body = {"model": "claude-3-5-haiku-20241022", "content": [{"type": "text", "text": "billing"}]}
    cassette = {
        "version": 1,
        "interactions": [
            {
                "request": {
                    "method": "POST",
                    "uri": f"https://{host}/v1/messages",
                    "body": json.dumps({"model": "claude-3-5-haiku-latest", "messages": []}),
                    "headers": {},
                },
                "response": {
                    "status": {"code": 200, "message": "OK"},
                    "headers": {"content-type": ["application/json"], "date": [day]},
                    "body": {"string": json.dumps(body)},
                },
            }
        ],
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_triage.yaml").write_text(yaml.safe_dump(cassette), encoding="utf-8")


def test_another_recorders_tapes_are_read_for_host_and_date(tmp_path: Path) -> None:
    _vcr_cassette(
        tmp_path / "tests" / "cassettes", host="api.anthropic.com", day="Tue, 01 Dec 2026 23:30:00 GMT"
    )
    honest = (
        "# Replay\n\n## The recording\n\n- Endpoint: `POST https://api.anthropic.com/v1/messages`\n"
        "- Model: claude-3-5-haiku-latest\n- Recorded: 2026-12-02 (my time zone; the `date` header)\n"
    )
    (tmp_path / "REPLAY.md").write_text(honest, encoding="utf-8")
    assert _contradictions(replay_doc(folder_context(tmp_path))) == []
    lying = honest.replace("https://api.anthropic.com", "http://127.0.0.1:9000").replace(
        "2026-12-02", "2026-12-05"
    )
    (tmp_path / "REPLAY.md").write_text(lying, encoding="utf-8")
    assert _contradictions(replay_doc(folder_context(tmp_path))) == [
        "REPLAY.md:5 names endpoint host 127.0.0.1, but the tapes were recorded against api.anthropic.com "
        "(e.g. tests/cassettes/test_triage.yaml, request URL)",
        "REPLAY.md:7 says the tapes were recorded on 2026-12-05, but they were recorded on 2026-12-01 "
        "(e.g. tests/cassettes/test_triage.yaml, response date header)",
    ]


# ----------------------------------------------------------------------------------------- real grades

_GIT = ["git", "-c", "user.name=Candidate", "-c", "user.email=candidate@example.invalid"]


def _submission(tmp_path: Path, doc: str) -> Path:
    repo = tmp_path / "submission"
    ignore = shutil.ignore_patterns(".ruff_cache", ".pytest_cache", "__pycache__", "*.misses.jsonl", ".venv")
    shutil.copytree(SAMPLE, repo, ignore=ignore)
    (repo / "REPLAY.md").write_text(doc, encoding="utf-8")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "submission"]):
        subprocess.run([*_GIT, *args], cwd=repo, check=True, capture_output=True)
    return repo


@pytest.mark.slow
@pytest.mark.index
@pytest.mark.parametrize(
    ("lie", "doc", "needle", "said"),
    [
        ("host", _lying_about_host(), _LIE_HOST, "names endpoint host api.openai.com, but the tapes were"),
        ("date", _lying_about_date(), _LIE_DATE, "says the tapes were recorded on 2025-03-14, but they were"),
    ],
)
def test_a_graded_submission_whose_replay_md_lies_loses_the_row(
    tmp_path: Path, grade_cache: Path, lie: str, doc: str, needle: str, said: str
) -> None:
    report = grade(str(_submission(tmp_path, doc)), rubric=load_rubric(), timeout=120, cache_root=grade_cache)
    row = next(r for r in report["rows"] if r["id"] == "replay-doc")
    assert row["score"] is not None and row["score"] < row["max"], (lie, row)
    assert row["evidence"] == "REPLAY.md covers 6/6 topics, 1 contradictions"
    assert any(d.startswith(f"REPLAY.md:{_line(doc, needle)} {said}") for d in row["details"]), row["details"]
