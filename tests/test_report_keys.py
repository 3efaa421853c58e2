"""Keys a tool reading the JSON report may rely on: `notes` and `findings` are always there, [] when empty.

Through the real `grade` command (a subprocess) on a small real git submission.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from grader.schemas import load_schema

pytestmark = pytest.mark.index  # grading installs the grader's pinned test tools

_CLEAN = {
    "tests/test_ok.py": """
        def test_adds():
            assert 1 + 1 == 2
    """,
    "cassettes/.gitkeep": "",
}
# A manifest naming an existing cassette folder: no manifest note, so nothing to note at all.
_PYPROJECT = (
    '[project]\nname = "clean"\nversion = "0.1.0"\ndependencies = []\n\n'
    '[tool.takehome]\ncassette_dir = "cassettes"\n'
)


def test_json_report_always_has_notes_and_findings(make_submission, grade_cli, grade_cache: Path) -> None:
    repo = make_submission(_CLEAN, name="clean", pyproject=_PYPROJECT)
    out = repo.parent / "report.json"
    done = grade_cli(
        [str(repo), "--format", "json", "--quiet", "--output", str(out), "--cache-dir", str(grade_cache)],
        cwd=repo.parent,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    report = json.loads(text)
    jsonschema.Draft202012Validator(load_schema("grade-report")).validate(report)
    assert report["notes"] == [], report["notes"]
    assert isinstance(report["findings"], list)
    assert '\n  "notes": [' in text  # present as a key even when empty, not left out


def test_a_note_lands_in_the_same_list(make_submission, grade_cli, grade_cache: Path) -> None:
    """With --keep-workspace the one note is there, in the same key."""
    repo = make_submission(_CLEAN, name="kept", pyproject=_PYPROJECT)
    done = grade_cli(
        [str(repo), "--format", "json", "--quiet", "--keep-workspace", "--cache-dir", str(grade_cache)],
        cwd=repo.parent,
    )
    assert done.returncode == 0, done.stderr
    notes = json.loads(done.stdout)["notes"]
    prefix = "workspace kept at "
    kept = [note.removeprefix(prefix) for note in notes if note.startswith(prefix)]
    assert len(kept) == 1, notes
    shutil.rmtree(kept[0], ignore_errors=True)  # the workspace it kept, ours to remove
