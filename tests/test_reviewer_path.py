"""The reviewer's path through the real `grade` command: a repository with uncommitted work is graded as
committed, and the report says what was left out; a plain folder has no commit (schema-valid null)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from grader.schemas import load_schema
from tests.test_batch import copy_sample, run_grade
from tests.test_shard_merge import cheap_rubric


@pytest.mark.index
def test_dirty_checkout_is_graded_as_committed_with_a_note(tmp_path: Path) -> None:
    repo = copy_sample(tmp_path / "alice")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    (repo / "REPLAY.md").unlink()  # deleted in the working tree, still committed
    (repo / "notes.txt").write_text("draft\n")  # untracked
    (repo / ".pytest_cache").mkdir(exist_ok=True)  # ignored by the sample's .gitignore: not listed
    rubric = tmp_path / "cheap.yaml"
    rubric.write_text(cheap_rubric())
    done = run_grade(["--rubric", str(rubric), "--format", "json", "--quiet", str(repo)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    jsonschema.validate(report, load_schema("grade-report"))
    assert report["commit"] == head
    rows = {row["id"]: row for row in report["rows"]}
    assert rows["replay-doc"]["score"] == 3, "the committed REPLAY.md is the one graded"
    note = next(n for n in report["notes"] if n.startswith("graded as committed"))
    assert f"({head[:12]}): 2 uncommitted change(s)" in note
    assert "D REPLAY.md" in note and "?? notes.txt" in note and ".pytest_cache" not in note
    assert (repo / "notes.txt").read_text() == "draft\n"  # the reviewer's copy is untouched


@pytest.mark.index
def test_clean_checkout_has_no_note_and_plain_copy_has_null_commit(tmp_path: Path) -> None:
    repo = copy_sample(tmp_path / "bob")
    rubric = tmp_path / "cheap.yaml"
    rubric.write_text(cheap_rubric())
    clean = run_grade(["--rubric", str(rubric), "--format", "json", "--quiet", str(repo)], cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert not any("uncommitted" in n for n in json.loads(clean.stdout).get("notes", []))
    plain = Path(shutil.copytree(repo, tmp_path / "plain", ignore=shutil.ignore_patterns(".git")))
    done = run_grade(["--rubric", str(rubric), "--format", "json", "--quiet", str(plain)], cwd=tmp_path)
    report = json.loads(done.stdout)
    jsonschema.validate(report, load_schema("grade-report"))
    assert report["commit"] is None
    for fmt in ("junit", "sarif", "gradescope", "html", "text", "markdown"):
        rendered = run_grade(["--rubric", str(rubric), "--format", fmt, "--quiet", str(plain)], cwd=tmp_path)
        assert rendered.returncode == 0, (fmt, rendered.stderr)
        assert "None" not in rendered.stdout.replace("NoneType", ""), fmt
