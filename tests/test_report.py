"""Report renderers (json, markdown, text) and the JSON Schemas they and the rubric follow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from grader.checks import Check, CheckResult, Finding
from grader.report import FORMATS, render
from grader.rubric import load_rubric, score, totals
from grader.schemas import load_schema

REPO = Path(__file__).resolve().parents[1]

RUBRIC = """\
version: 1
name: Report test
thresholds:
  limit: 2
rows:
  - id: offline
    title: Replays offline
    weight: 3
    check: replay
    levels:
      3: passed > 0 and failed == 0
      1: passed > 0
      0: true
    evidence: "{{ passed }} passed | {{ failed }} failed"
  - id: secrets
    title: No credentials
    weight: 2
    check: secrets
    levels:
      3: findings == 0
      0: true
  - id: doc
    title: REPLAY.md explains the tapes
    weight: 1
    check: doc
    levels:
      0: true
"""


def _check(check_id: str, *facts: str) -> Check:
    def check(ctx):
        return CheckResult(facts={})

    check.__doc__ = f"Fake {check_id}.\n\nFacts:\n" + "".join(f"    {f}: {f}\n" for f in facts)
    return Check.from_function(check_id, check)


CHECKS = {
    "replay": _check("replay", "passed", "failed"),
    "secrets": _check("secrets", "findings"),
    "doc": _check("doc"),
}


@pytest.fixture
def report(tmp_path) -> dict:
    path = tmp_path / "rubric.yaml"
    path.write_text(RUBRIC, encoding="utf-8")
    rubric = load_rubric(path, checks=CHECKS)
    results = {
        "replay": CheckResult(
            facts={"passed": 24, "failed": 0, "summary": "24 passed"},
            details=["tests/test_triage.py:41 replayed 12 tapes"],
        ),
        "secrets": CheckResult(
            facts={"findings": 1, "summary": "1 finding"},
            findings=[Finding(rule="openai-key", message="sk-… in history", location="abc1234:.env:1")],
            manual="a key-shaped string in history; check whether it is live",
        ),
        "doc": CheckResult(facts={}, not_assessable="install failed: index unreachable"),
    }
    rows = score(rubric, results)
    return {
        "schema": "grade-report/1",
        "target": "https://example.invalid/candidate/triage.git",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "graded_at": "2026-11-29T10:04:11Z",
        "grader_version": "0.1.0",
        "rubric": rubric.reference(),
        "isolation": {"network": "namespace+pytest-socket", "credentials": "scrubbed"},
        "rows": [row.as_dict() for row in rows],
        "total": totals(rows),
        "facts": {check_id: result.facts for check_id, result in results.items()},
        "timings": {"acquire": 0.3, "install": 1.9, "replay": 1.1},
        "findings": [
            {
                "check": "secrets",
                "rule": "openai-key",
                "location": "abc1234:.env:1",
                "message": "sk-… in history",
            }
        ],
        "notes": ["install took the uv path"],
    }


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# -------------------------------------------------------------------------------------------- json


def test_formats_and_unknown_format():
    assert FORMATS == ("json", "markdown", "text", "sarif", "junit", "gradescope", "html")
    with pytest.raises(
        ValueError, match="unknown report format 'pdf'; choose one of: json, markdown, text, sarif"
    ):
        render({}, "pdf")


def test_json_round_trips_validates_and_keeps_schema_order(report):
    shuffled = dict(reversed(list(report.items())))
    text = render(shuffled, "json")
    assert text.endswith("}\n")
    assert text.startswith('{\n  "schema": "grade-report/1",\n  "target"')
    parsed = json.loads(text)
    assert parsed == report
    assert list(parsed)[:11] == [
        "schema", "target", "commit", "graded_at", "grader_version", "rubric", "isolation",
        "rows", "total", "facts", "timings",
    ]  # fmt: skip
    _validator("grade-report").validate(parsed)
    assert "sk-…" in text  # non-ASCII kept readable, not \\u-escaped


def test_report_rows_carry_status_score_and_totals(report):
    rows = {row["id"]: row for row in report["rows"]}
    assert (rows["offline"]["status"], rows["offline"]["score"], rows["offline"]["auto"]) == (
        "scored",
        3,
        True,
    )
    assert (rows["secrets"]["status"], rows["secrets"]["score"]) == ("manual", None)
    assert rows["secrets"]["details"] == ["abc1234:.env:1: sk-… in history"]
    assert rows["doc"]["status"] == "not-assessable"
    assert rows["doc"]["evidence"] == "not assessable: install failed: index unreachable"
    assert report["total"] == {"points": 9, "max": 9, "percent": 100.0}


@pytest.mark.parametrize(
    "breakage",
    [
        lambda r: r["rows"][0].update(score=None),  # scored rows need a score
        lambda r: r["rows"][1].update(score=2),  # manual rows have none
        lambda r: r["rows"][0].update(status="skipped"),
        lambda r: r.update(schema="grade-report/2"),
        lambda r: r.update(extra=1),
        lambda r: r["rubric"].update(sha256="not-a-hash"),
        lambda r: r["isolation"].update(network="none"),
        lambda r: r.pop("timings"),
        lambda r: r.pop("notes"),  # always present, [] when there is none
        lambda r: r.pop("findings"),
        lambda r: r["findings"][0].pop("location"),
    ],
)
def test_schema_rejects_malformed_reports(report, breakage):
    breakage(report)
    with pytest.raises(jsonschema.ValidationError):
        _validator("grade-report").validate(json.loads(render(report, "json")))


# ---------------------------------------------------------------------------------------- markdown


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_table_and_details(report):
    md = render(report, "markdown")
    lines = md.splitlines()
    assert lines[0] == "## Grade report: https://example.invalid/candidate/triage.git"
    assert "- **Total:** 9/9 (100%), excluding 1 manual and 1 not assessable" in lines
    assert "- **Commit:** `0123456789ab`" in lines
    table = [line for line in lines if line.startswith("| ")]
    assert table[0] == "| row | score | weight | evidence |"
    assert table[2] == "| `offline` | 3/3 | 3 | 24 passed \\| 0 failed |"  # the evidence pipe is escaped
    assert table[3] == "| `secrets` | manual | 2 | a key-shaped string in history; check whether it is live |"
    assert table[4] == "| `doc` | n/a | 1 | not assessable: install failed: index unreachable |"
    assert all(_unescaped_pipes(line) == 5 for line in table)
    details = md.split("### Details", 1)[1]
    assert "#### `offline`: Replays offline (3/3)\n\n- tests/test_triage.py:41 replayed 12 tapes\n" in details
    assert "#### `secrets`: No credentials (manual)\n\n- abc1234:.env:1: sk-… in history\n" in details
    assert "`doc`" not in details  # no details, no empty section
    assert md.endswith("### Notes\n\n- install took the uv path\n")


def test_markdown_keeps_hostile_evidence_inside_its_cell(report):
    report["rows"][0]["evidence"] = "a | b\nc <script>"
    row = next(line for line in render(report, "markdown").splitlines() if line.startswith("| `offline`"))
    assert row == "| `offline` | 3/3 | 3 | a \\| b c &lt;script> |"


# -------------------------------------------------------------------------------------------- text


def test_text_columns_align_and_show_manual_and_na(report):
    text = render(report, "text")
    lines = text.splitlines()
    assert lines[0] == "grade report: https://example.invalid/candidate/triage.git"
    header = next(i for i, line in enumerate(lines) if line.startswith("ROW"))
    table = lines[header : header + 6]
    assert table == [
        "ROW      SCORE   WEIGHT  EVIDENCE",
        "offline  3/3     3       24 passed | 0 failed",
        "         - tests/test_triage.py:41 replayed 12 tapes",
        "secrets  manual  2       a key-shaped string in history; check whether it is live",
        "         - abc1234:.env:1: sk-… in history",
        "doc      n/a     1       not assessable: install failed: index unreachable",
    ]
    assert "total: 9/9 (100%), excluding 1 manual and 1 not assessable" in lines
    assert text.endswith("note: install took the uv path\n")


def test_text_and_markdown_with_no_scored_rows(report):
    report["rows"] = [row for row in report["rows"] if row["status"] != "scored"]
    report["total"] = {"points": 0, "max": 0, "percent": 0}
    assert "total: 0/0 (0%), excluding 1 manual and 1 not assessable" in render(report, "text")
    assert "**Total:** 0/0 (0%), excluding" in render(report, "markdown")


# ------------------------------------------------------------------------------------------ rubric


def _as_json(data):
    return json.loads(json.dumps(data))  # YAML's integer level keys become strings, as in JSON


def test_default_rubric_matches_the_rubric_schema():
    data = yaml.safe_load((REPO / "rubric" / "default.yaml").read_text(encoding="utf-8"))
    _validator("rubric").validate(_as_json(data))


def test_rubric_schema_rejects_what_the_loader_rejects():
    data = _as_json(yaml.safe_load(RUBRIC))
    validator = _validator("rubric")
    validator.validate(data)
    for broken in (
        {**data, "version": 2},
        {**data, "rows": []},
        {**data, "colour": "red"},
        {**data, "rows": [{**data["rows"][0], "weight": 0}]},
        {**data, "rows": [{**data["rows"][0], "wieght": 1}]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)


def test_load_schema_names():
    assert load_schema("rubric.schema.json") == load_schema("rubric")
    with pytest.raises(ValueError, match="unknown schema"):
        load_schema("nope")
    assert load_schema("grade-report")["title"] == "grade-report/1"
