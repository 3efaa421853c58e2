"""make-targets: "the demo passed" means it replayed from the tapes (red team 5, G11).

A `make demo` that prints a table saved from one real run (`@cat`) exits 0 offline with no connection attempt,
as a replay does; what tells them apart is that a replay opens a tape. Both submissions below are the sample
with only its demo recipe changed, graded for real (install, sandbox, audit hook) with the default rubric's
make-targets row alone.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from grader.audit import AuditLog
from grader.checks.make_targets import _tapes_read
from grader.grading import grade
from grader.rubric import load_rubric
from tests.adversarial.builders import commit, sample_copy
from tests.helpers.context import folder_context
from tests.helpers.tape import A_TAPE

_SAMPLE_DEMO = "\tCASSETTE_MODE=replay $(PYTHON) -m $(PACKAGE) --file data/tickets.jsonl --table\n"
# What the sample's demo printed once, saved (the shape of its table; the words do not matter to the check).
_SAVED_TABLE = """\
ticket  intent    needs_human  message
T01     billing   no           I was charged twice for my order
T02     bug       yes          The export button crashes the app
T03     account   no           How do I change my email address?
"""
_SCRIPT = """\
#!/bin/sh
# The demo as a shell script: the Python it starts is the submission's, under the grader's audit hook.
set -e
echo "triaging data/tickets.jsonl from the tapes"
CASSETTE_MODE=replay python -m support_triage_agent --file data/tickets.jsonl --table
"""


def _with_demo(dest: Path, recipe: str, files: dict[str, str]) -> Path:
    repo = sample_copy(dest)
    makefile = repo / "Makefile"
    text = makefile.read_text(encoding="utf-8")
    assert text.count(_SAMPLE_DEMO) == 1, "the sample's demo recipe changed: update this test"
    makefile.write_text(text.replace(_SAMPLE_DEMO, recipe), encoding="utf-8")
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content, encoding="utf-8")
    return commit(repo, "take-home submission")


def _make_targets(repo: Path, cache: Path) -> tuple[dict[str, Any], dict[str, Any], int]:
    rubric = load_rubric()
    rubric = replace(rubric, rows=tuple(r for r in rubric.rows if r.id == "make-targets"))
    report = grade(str(repo), rubric=rubric, timeout=120, cache_root=cache)
    (row,) = report["rows"]
    return row, report["facts"]["make-targets"], rubric.max


def test_only_recordings_the_tape_reader_parses_count_as_tapes_read(tmp_path: Path) -> None:
    repo = tmp_path / "sub"
    files = {**A_TAPE, "cassettes/notes.json": "not a recording", "data/table.txt": "T01 x"}
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    (tape,) = A_TAPE
    ctx = folder_context(repo)

    # The audit root is the run's own copy of the tree: paths come repo-relative, `./` as the demo wrote it.
    opened = AuditLog(opened={f"./{tape}", "cassettes/notes.json", "data/table.txt", "pyproject.toml"})
    assert _tapes_read(ctx, opened) == [tape]
    # A file in the tape folder that is no recording, or a saved table, is not a tape read.
    assert _tapes_read(ctx, AuditLog(opened={"cassettes/notes.json", "data/table.txt"})) == []


@pytest.mark.index
@pytest.mark.slow
def test_a_demo_that_prints_a_saved_table_is_not_a_passing_demo(tmp_path: Path, grade_cache: Path) -> None:
    table = {"data/demo_table.txt": _SAVED_TABLE}
    repo = _with_demo(tmp_path / "canned", "\t@cat data/demo_table.txt\n", table)

    row, facts, top = _make_targets(repo, grade_cache)

    assert facts["demo_passed"] and not facts["demo_read_tapes"], facts
    assert facts["test_passed"] and facts["record_refuses_without_key"], facts
    assert row["status"] == "scored" and row["score"] < top, row
    assert "demo exited 0 but opened no tape" in row["evidence"], row
    demo = next(line for line in row["details"] if " demo: " in line)
    assert demo.startswith("Makefile:") and "opened no tape" in demo and "under cassettes/" in demo, demo


@pytest.mark.index
@pytest.mark.slow
def test_a_shell_script_demo_that_replays_through_python_passes(tmp_path: Path, grade_cache: Path) -> None:
    # Not Python itself: a shell script calling the CLI. Its Python process runs under the audit hook.
    repo = _with_demo(tmp_path / "script", "\t@sh scripts/demo.sh\n", {"scripts/demo.sh": _SCRIPT})
    tapes = sorted(p.name for p in (repo / "cassettes").glob("*.json"))

    row, facts, top = _make_targets(repo, grade_cache)

    assert facts["demo_passed"] and facts["demo_read_tapes"], (facts, row)
    assert row["score"] == top, row
    assert "demo passed, read " in row["evidence"], row
    demo = next(line for line in row["details"] if " demo: " in line)
    assert "read " in demo and "cassettes/" in demo, demo
    named = [name for name in tapes if f"cassettes/{name}" in demo]
    assert named, (demo, tapes)
