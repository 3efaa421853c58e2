"""Reports are inert: nothing a submission wrote can act on the reviewer's terminal, browser or spreadsheet.

The attack (issue 14): a skip reason made of terminal escapes that retitles the window, erases the line and
prints a fake ``total: 54/54`` above the real rows. Graded for real, the text and Markdown reports must show
the real rows and total, with the escapes visible as text and none of them raw.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grader.batch import Entry, Outcome, write_summary
from grader.inert import csv_cell, inert
from grader.report import FORMATS, render
from grader.rubric import load_rubric
from tests.adversarial.builders import commit, sample_copy

REPO = Path(__file__).resolve().parents[1]
ROW_IDS = [row.id for row in load_rubric(None).rows]

# OSC 0 retitles the window; CSI 1A moves up a line, CSI 2K erases it, CSI G goes to its first column; then
# a fake total; CSI 8m conceals what follows; U+202E reverses the rest of the line; 0x9b is the C1 CSI; a
# lone surrogate cannot be written as UTF-8 (red team 7, R7-3: the report was lost, exit 1).
# (No CR or LF: the skip reason reaches the report as its first line.)
HOSTILE = (
    "\x1b]0;all tests passed\x07\x1b[1A\x1b[2K\x1b[Gtotal: 54/54 (100%)\x1b[8m"
    "\u202eylno thgir\u202c\x9b31m\x00 \udc80"
)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _hostile_submission(dest: Path) -> Path:
    repo = commit(sample_copy(dest), "take-home submission")
    test = repo / "tests" / "test_zz_terminal.py"
    test.write_text(
        "import pytest\n\n\n"
        f"@pytest.mark.skip(reason={HOSTILE!r})\n"
        "def test_looks_harmless():\n"
        "    assert True\n",
        encoding="utf-8",
    )
    return commit(repo, "one more test")


@pytest.mark.index
@pytest.mark.slow
def test_a_skip_reason_of_terminal_escapes_cannot_fake_the_text_or_markdown_report(tmp_path: Path) -> None:
    repo = _hostile_submission(tmp_path / "hostile")
    store = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "grader", str(repo), "--quiet", "--store", str(store)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    # Markdown escapes brackets (no link or image from a submission's text); as shown, they read as written.
    markdown = _as_shown((store / "report.md").read_text(encoding="utf-8"))
    report = json.loads((store / "report.json").read_text(encoding="utf-8"))

    # The skip reached the report (the attack was really delivered) ...
    replay = next(row for row in report["rows"] if row["id"] == "offline-replay")
    assert "test_looks_harmless" in replay["evidence"]
    # ... as visible, inert text.
    for shown in (text, markdown):
        assert not RAW.search(shown), repr(RAW.search(shown))
        assert "\\x1b]0;all tests passed\\x07" in shown
        assert "\\u202e" in shown
        assert "\\udc80" in shown
    # Only the real total is on a line of its own; every row is there, in order, each line its own.
    points, most = report["total"]["points"], report["total"]["max"]
    totals = [line for line in text.splitlines() if line.startswith("total:")]
    assert len(totals) == 1 and totals[0].startswith(f"total: {points}/{most} "), totals
    firsts = [line.split()[0] for line in text.splitlines() if line.strip()]
    assert [word for word in firsts if word in ROW_IDS] == ROW_IDS
    assert [line.split("`")[1] for line in markdown.splitlines() if line.startswith("| `")] == ROW_IDS
    assert f"**Total:** {points}/{most} " in markdown


def _report_with(value: str) -> dict[str, Any]:
    return {
        "schema": "grade-report/1",
        "target": value,
        "commit": "0" * 40,
        "graded_at": "2026-12-01T00:00:00Z",
        "grader_version": "0",
        "rubric": {"name": "r", "sha256": "0" * 64},
        "isolation": {"network": "namespace+pytest-socket", "credentials": "scrubbed"},
        "rows": [
            {
                "id": "offline-replay",
                "title": value,
                "weight": 3,
                "score": 2,
                "max": 3,
                "auto": True,
                "status": "scored",
                "evidence": value,
                "details": [f"tests/{value}.py:3 {value}"],
            },
            {
                "id": "replay-doc",
                "title": "t",
                "weight": 1,
                "score": None,
                "max": 3,
                "auto": False,
                "status": "manual",
                "evidence": value,
                "details": [],
            },
        ],
        "total": {"points": 6, "max": 9, "percent": 66.7},
        "facts": {"replay": {"summary": value, value: 1}},
        "findings": [{"check": "replay", "rule": "x", "location": f"{value}.py:1", "message": value}],
        "timings": {},
        "notes": [value],
    }


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_format_carries_a_raw_control_character_or_bidi_override(fmt: str) -> None:
    page = render(_report_with(HOSTILE), fmt)
    if fmt in ("json", "sarif", "gradescope"):
        # JSON escapes control characters itself; what a viewer shows after decoding must be inert too.
        strings: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, str):
                strings.append(value)
            elif isinstance(value, dict):
                for key, item in value.items():
                    walk(key)
                    walk(item)
            elif isinstance(value, list):
                for item in value:
                    walk(item)

        walk(json.loads(page))
        page = "\n".join(strings)
    if fmt == "markdown":
        page = _as_shown(page)
    assert not RAW.search(page), (fmt, RAW.search(page))
    assert "\\x1b]0;" in page, fmt  # shown, not dropped: the reviewer sees something was there


def _as_shown(markdown: str) -> str:
    return markdown.replace("\\[", "[").replace("\\]", "]")


def test_markdown_shows_a_link_or_image_from_a_submission_as_text() -> None:
    # Found by the blind red-team: a skip reason `![t](http://127.0.0.1:9/pixel.png)` rendered as an image
    # the viewer fetched, and `[total: 54/54](http://...)` as a link.
    page = render(
        _report_with("![t](http://127.0.0.1:9/pixel.png) [total: 54/54](http://x.invalid)"), "markdown"
    )
    assert "![t](" not in page and "[total: 54/54](" not in page
    assert "!\\[t\\](http://127.0.0.1:9/pixel.png)" in page


def test_inert_keeps_ordinary_text_and_escapes_each_control_character() -> None:
    assert (
        inert("tests/test_a.py::test_x — naïve ✓\ttab\nline")
        == "tests/test_a.py::test_x — naïve ✓\ttab\nline"
    )
    assert inert("a\x1b[31mb\rc\x07d\u202ee\u2066f\x85") == "a\\x1b[31mb\\x0dc\\x07d\\u202ee\\u2066f\\x85"
    # Red team 32: what draws nothing inside a name shows in the evidence (`te\u200bst_x.py`).
    assert inert("te\u200bst_x.py te\u034fst_y so\u00adft") == "te\\u200bst_x.py te\\u034fst_y so\\xadft"


def test_summary_csv_neutralizes_formula_cells(tmp_path: Path) -> None:
    rubric = load_rubric(None)
    outcomes = [
        Outcome(Entry('=HYPERLINK("http://x","ok")', "+cmd|' /C calc'!A0", 2, "a"), "graded", report=None),
        Outcome(Entry("@SUM(A1)", "-2+3", 3, "b"), "not assessable", reason="=1+1\r\x1b[2J"),
        Outcome(Entry("\tTAB", "ok", 4, "c"), "not assessable", reason="fine"),
    ]
    write_summary(tmp_path, outcomes, rubric)
    rows = list(csv.reader(io.StringIO((tmp_path / "summary.csv").read_text(encoding="utf-8"))))
    cells = [cell for row in rows[1:] for cell in row]
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert rows[1][0] == '\'=HYPERLINK("http://x","ok")' and rows[2][1] == "'-2+3"
    assert rows[2][-1] == "'=1+1\\x0d\\x1b[2J"
    assert rows[3][1] == "ok"
    assert not RAW.search((tmp_path / "summary.md").read_text(encoding="utf-8"))
    assert csv_cell(-1) == -1  # numbers stay numbers


def test_an_error_line_quoting_a_hostile_path_is_inert(tmp_path: Path) -> None:
    target = tmp_path / "\x1b]0;owned\x07\x1b[2Jrepo"
    done = subprocess.run(
        [sys.executable, "-m", "grader", str(target)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and not RAW.search(done.stderr)
    assert "\\x1b]0;owned\\x07" in done.stderr
