"""The ecosystem formats (sarif, junit, gradescope, html) on real graded reports.

SARIF is validated against the vendored OASIS schema, JUnit is read back with junitparser, Gradescope is
checked key by key against its documented results.json keys, HTML is parsed for escaping and links (the
browser check is tests/test_html_browser.py). The leaky submission is sample_solution with a key committed
in a file named like a script tag and another key added then deleted (so it lives only in history).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from grader.report import FORMATS, render
from grader.secrets.samples import expand
from tests.helpers.git import GIT_ENV as _GIT_ENV

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_solution"
SARIF_SCHEMA = REPO / "grader" / "schemas" / "vendor" / "sarif-schema-2.1.0.json"
TREE_KEY = expand("sk-proj-{{b64url:74}}T3BlbkFJ{{b64url:74}}", "formats:tree")
HISTORY_KEY = expand("sk-ant-api03-{{b64url:93}}AA", "formats:history")
XSS_FILE = "<script>alert(1)</script>.py"  # a folder `<script>alert(1)<` holding `script>.py`


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, **_GIT_ENV, "HOME": str(repo.parent)}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def make_leaky_submission(root: Path) -> Path:
    """sample_solution, plus a key in a script-tag-named file and another only in history."""
    repo = root / "leaky"
    shutil.copytree(
        SAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".venv", "*.pyc")
    )
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "baked and recorded")
    (repo / ".env").write_text(f"ANTHROPIC_API_KEY={HISTORY_KEY}\n", encoding="utf-8")
    _git(repo, "add", "-f", ".env")
    _git(repo, "commit", "-qm", "local settings")
    _git(repo, "rm", "-q", ".env")
    _git(repo, "commit", "-qm", "oops")
    xss = repo / XSS_FILE
    xss.parent.mkdir(parents=True)
    xss.write_text(f'"""Scratch."""\n\nKEY = "{TREE_KEY}"\n', encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "scratch")
    return repo


def grade_json(target: Path, *extra: str) -> dict[str, Any]:
    """The real `grade` command's JSON report for ``target``."""
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(target), "--format", "json", "--quiet", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def leaky_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("formats")
    # A private copy: JUnit reads the check ids from the rubric file while its sha256 still matches.
    rubric = shutil.copy(REPO / "rubric" / "default.yaml", root / "rubric.yaml")
    return grade_json(make_leaky_submission(root), "--rubric", str(rubric))


@pytest.fixture(scope="module")
def sample_report() -> dict[str, Any]:
    return grade_json(SAMPLE)


def _no_key_anywhere(text: str) -> None:
    for key in (TREE_KEY, HISTORY_KEY):
        assert key not in text
        assert key[12:40] not in text  # not even a long middle slice


# ------------------------------------------------------------------------------------------- dispatch


def test_every_format_is_offered_by_the_cli(tmp_path: Path) -> None:
    assert {"sarif", "junit", "gradescope", "html"} <= set(FORMATS)
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    for fmt in FORMATS:
        assert fmt in proc.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "grader", str(tmp_path), "--format", "pdf"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "invalid choice: 'pdf'" in bad.stderr


@pytest.mark.index
def test_the_leaky_submission_has_the_findings_the_formats_need(leaky_report) -> None:
    rules = {(f["check"], f["rule"]) for f in leaky_report["findings"]}
    assert ("secrets", "openai-project-key") in rules
    assert ("secrets", "anthropic-api-key") in rules
    locations = [f["location"] for f in leaky_report["findings"]]
    assert f"{XSS_FILE}:3" in locations
    assert any(re.fullmatch(r"[0-9a-f]{7,40}:\.env:1", loc) for loc in locations), locations


# ------------------------------------------------------------------------------------------------ sarif


def _sarif_validator() -> jsonschema.Draft4Validator:
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


@pytest.mark.index
def test_sarif_validates_and_maps_findings_to_locations(leaky_report) -> None:
    text = render(leaky_report, "sarif")
    log = json.loads(text)
    _sarif_validator().validate(log)
    assert log["version"] == "2.1.0" and len(log["runs"]) == 1
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "cassette-grader" and driver["version"] == leaky_report["grader_version"]
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert len(rule_ids) == len(set(rule_ids))
    assert {"secrets/openai-project-key", "secrets/anthropic-api-key"} <= set(rule_ids)
    assert len(run["results"]) == len(leaky_report["findings"])

    by_location = {r["properties"]["location"]: r for r in run["results"]}
    tree = by_location[f"{XSS_FILE}:3"]
    assert tree["ruleId"] == "secrets/openai-project-key"
    assert tree["level"] == "error"
    assert driver["rules"][tree["ruleIndex"]]["id"] == "secrets/openai-project-key"
    physical = tree["locations"][0]["physicalLocation"]
    assert physical["region"] == {"startLine": 3}
    assert physical["artifactLocation"]["uri"] == "%3Cscript%3Ealert%281%29%3C/script%3E.py"
    assert "commit" not in tree["properties"]

    (history,) = [r for r in run["results"] if r["ruleId"] == "secrets/anthropic-api-key"]
    assert "(in git history)" in history["message"]["text"]
    physical = history["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == ".env" and physical["region"] == {"startLine": 1}
    assert re.fullmatch(r"[0-9a-f]{7,40}", history["properties"]["commit"])
    _no_key_anywhere(text)


@pytest.mark.index
def test_sarif_fingerprints_are_stable_and_distinct(leaky_report) -> None:
    first = json.loads(render(leaky_report, "sarif"))["runs"][0]["results"]
    again = json.loads(render(json.loads(json.dumps(leaky_report)), "sarif"))["runs"][0]["results"]
    prints = [r["partialFingerprints"] for r in first]
    assert prints == [r["partialFingerprints"] for r in again]
    assert len({json.dumps(p, sort_keys=True) for p in prints}) == len(prints)
    moved = json.loads(json.dumps(leaky_report))
    moved["findings"][0]["location"] += "0"
    changed = json.loads(render(moved, "sarif"))["runs"][0]["results"][0]["partialFingerprints"]
    assert changed != prints[0]


@pytest.mark.index
def test_sarif_of_the_sample_is_valid_and_has_no_error(sample_report) -> None:
    log = json.loads(render(sample_report, "sarif"))
    _sarif_validator().validate(log)
    assert len(log["runs"][0]["results"]) == len(sample_report["findings"])
    assert not [r for r in log["runs"][0]["results"] if r["level"] == "error"]  # no credential
    assert log["runs"][0]["properties"]["total"]["points"] == sample_report["total"]["points"]


@pytest.mark.index
def test_the_vendored_schema_rejects_what_it_should(leaky_report) -> None:
    # A validator that accepts anything would make the tests above meaningless.
    log = json.loads(render(leaky_report, "sarif"))
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        _sarif_validator().validate(log)


# ------------------------------------------------------------------------------------------------ junit


@pytest.mark.index
def test_junit_has_one_case_per_row_read_by_junitparser(leaky_report, tmp_path: Path) -> None:
    junitparser = pytest.importorskip("junitparser", reason="junitparser is a test dependency")
    path = tmp_path / "rubric.xml"
    path.write_text(render(leaky_report, "junit"), encoding="utf-8")
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    assert [s.name for s in suites] == ["rubric"]
    suite = suites[0]
    cases = {case.name: case for case in suite}
    rows = {row["id"]: row for row in leaky_report["rows"]}
    assert list(cases) == list(rows)
    assert suite.tests == len(rows)

    secrets = cases["no-credentials"]
    assert secrets.classname == "secrets"  # the check behind the row, from the default rubric
    assert rows["no-credentials"]["score"] < rows["no-credentials"]["max"]
    assert not secrets.is_passed
    (failure,) = secrets.result
    assert isinstance(failure, junitparser.Failure)
    assert failure.message == rows["no-credentials"]["evidence"]
    props = {p.name: p.value for p in secrets.child(junitparser.Properties)}
    assert props["score"] == str(rows["no-credentials"]["score"])
    assert props["max"] == "3" and props["weight"] == str(rows["no-credentials"]["weight"])

    full = [rid for rid, row in rows.items() if row["status"] == "scored" and row["score"] == row["max"]]
    assert full and all(cases[rid].is_passed for rid in full)
    assert cases["offline-replay"].classname == "replay"
    assert suite.failures == sum(1 for row in rows.values() if row["status"] == "scored" and row["score"] < 3)
    _no_key_anywhere(path.read_text(encoding="utf-8"))


@pytest.mark.index
def test_junit_skips_manual_and_not_assessable_rows_and_survives_control_characters(
    sample_report, tmp_path: Path
) -> None:
    junitparser = pytest.importorskip("junitparser", reason="junitparser is a test dependency")
    report = json.loads(json.dumps(sample_report))
    report["rows"][0].update(status="manual", score=None, auto=False, evidence="look at \x1b[31mthis\x00")
    report["rows"][1].update(status="not-assessable", score=None, auto=False, evidence="install failed")
    report["rubric"]["sha256"] = "0" * 64  # no longer the file on disk: classnames fall back
    path = tmp_path / "rubric.xml"
    path.write_text(render(report, "junit"), encoding="utf-8")
    suite = next(iter(junitparser.JUnitXml.fromfile(str(path))))
    cases = list(suite)
    assert isinstance(cases[0].result[0], junitparser.Skipped)
    assert cases[0].result[0].message.startswith("manual review needed: look at")
    assert isinstance(cases[1].result[0], junitparser.Skipped)
    assert cases[1].result[0].message == "not assessable: install failed"
    assert suite.skipped == 2
    assert {case.classname for case in cases} == {"rubric"}


# ------------------------------------------------------------------------------------------- gradescope

# Gradescope's documented results.json keys (autograder specifications).
_TOP_KEYS = {
    "score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
    "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard",
}  # fmt: skip
_TEST_KEYS = {
    "score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
    "visibility", "extra_data",
}  # fmt: skip
_VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
_OUTPUT_FORMATS = {"text", "html", "simple_format", "md", "ansi"}


@pytest.mark.index
def test_gradescope_results_use_documented_keys(leaky_report) -> None:
    results = json.loads(render(leaky_report, "gradescope"))
    assert set(results) <= _TOP_KEYS
    assert results["score"] == leaky_report["total"]["points"]
    assert results["visibility"] in _VISIBILITY and results["output_format"] in _OUTPUT_FORMATS
    assert str(leaky_report["total"]["points"]) in results["output"]
    rows = leaky_report["rows"]
    assert len(results["tests"]) == len(rows)
    for test, row in zip(results["tests"], rows, strict=True):
        assert set(test) <= _TEST_KEYS
        assert test["name"] == row["title"]
        assert test["visibility"] in _VISIBILITY and test["output_format"] in _OUTPUT_FORMATS
        assert row["evidence"] in test["output"]
        assert test["extra_data"]["weight"] == row["weight"]
        if row["status"] == "scored":
            # Weighted: each test is worth its row's share of the total.
            assert test["score"] == row["score"] * row["weight"]
            assert test["max_score"] == 3 * row["weight"]
            assert test["status"] == ("passed" if row["score"] == 3 else "failed")
    # Gradescope shows the sum of the tests: it is the report's total, points and maximum.
    assert sum(t["score"] for t in results["tests"]) == leaky_report["total"]["points"]
    assert sum(t["max_score"] for t in results["tests"]) == leaky_report["total"]["max"]
    assert results["extra_data"]["max_points"] == leaky_report["total"]["max"]
    numbers = [test["number"] for test in results["tests"]]
    assert numbers == sorted(numbers, key=int) and len(set(numbers)) == len(numbers)
    _no_key_anywhere(json.dumps(results))


@pytest.mark.index
def test_gradescope_gives_unscored_rows_zero_with_the_reason(sample_report) -> None:
    report = json.loads(json.dumps(sample_report))
    report["rows"][2].update(status="manual", score=None, auto=False, evidence="REPLAY.md says nothing")
    test = json.loads(render(report, "gradescope"))["tests"][2]
    # Counted toward neither side, as in the report's total.
    assert test["score"] == 0 and test["max_score"] == 0 and "status" not in test
    assert "Needs a reviewer" in test["output"] and "REPLAY.md says nothing" in test["output"]


# ------------------------------------------------------------------------------------------------- html


class _Page(HTMLParser):
    """Tags, hrefs and text of a page, as a browser would tokenize them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []
        self.row_ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.links.append(values["href"] or "")
        if tag == "tr" and values.get("data-row"):
            self.row_ids.append(values["data-row"] or "")
        for name in values:
            assert not name.startswith("on"), f"event handler attribute {name} on <{tag}>"

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _page(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


@pytest.mark.index
def test_html_is_self_contained_escaped_and_links_evidence(leaky_report) -> None:
    html = render(leaky_report, "html")
    page = _page(html)
    assert "script" not in page.tags and "img" not in page.tags and "link" not in page.tags
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing loaded from anywhere
    assert page.row_ids == [row["id"] for row in leaky_report["rows"]]
    text = "".join(page.text)
    assert XSS_FILE in text  # shown as text, not run
    assert leaky_report["target"] in text and leaky_report["commit"] in text
    assert "repo/%3Cscript%3Ealert%281%29%3C/script%3E.py#L3" in page.links
    assert any(re.fullmatch(r"repo/\.env#L1", link) for link in page.links)
    _no_key_anywhere(html)


@pytest.mark.index
def test_html_links_details_of_a_clean_report_and_refuses_unsafe_paths(sample_report) -> None:
    report = json.loads(json.dumps(sample_report))
    report["rows"][0]["details"] = [
        "../outside.py:3 climbs out",
        "/etc/passwd:1 is absolute",
        "connection to api.openai.com:443 refused",
        "<b>bold</b>.py:2 is text",
    ]
    report["findings"] = [
        {"check": "replay", "rule": "network-attempt", "location": 'tests/"quoted" x.py:9', "message": "m"}
    ]
    html = render(report, "html")
    page = _page(html)
    links = set(page.links)
    replay_doc = next(row for row in sample_report["rows"] if row["id"] == "replay-doc")
    assert replay_doc["details"]
    for detail in replay_doc["details"]:  # "REPLAY.md:7 covers endpoint"
        location = detail.split()[0]
        assert f"repo/{location.replace(':', '#L')}" in links
    assert not any("outside" in link or "passwd" in link or "openai.com" in link for link in links)
    assert "repo/tests/%22quoted%22%20x.py#L9" in links
    assert "b" not in page.tags
    assert "<b>bold</b>.py:2" in "".join(page.text)
