"""replay-doc reads a REPLAY.md in time proportional to its size, whatever its lines hold (red team 6, H3).

The heading rule was `^\\s{0,3}(#{1,6})\\s+(.*?)\\s*#*\\s*$`: on one heading line padded with blanks and
ending in another character it backtracked polynomially (4.5 KB of blanks: 132 s in the grader's own
process, past `--timeout` and `--budget`; a 500 KB file, days). The rule now matches the line once and the
closing #s are taken off in code, by the grader and by the candidate's `make check` alike.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.checks.replay_doc import _title

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_solution"

# Both readers of the rule on one submission, in a child process the test can stop: with the old pattern
# the child would run for days, and the test must fail, not hang.
_BOTH = """
import importlib.util, json, sys
from pathlib import Path
from grader.checks.replay_doc import replay_doc
from tests.helpers.context import folder_context
repo = Path(sys.argv[1])
graded = replay_doc(folder_context(repo)).facts["summary"]
spec = importlib.util.spec_from_file_location("selfcheck_h3", repo / "tools" / "selfcheck.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
previewed = module.check_replay_doc(repo / "cassettes")[0]
print(json.dumps([graded, previewed]))
"""


def test_a_heading_padded_with_blanks_is_read_at_once_by_the_grader_and_make_check(tmp_path: Path) -> None:
    repo = tmp_path / "sub"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache"))
    doc = repo / "REPLAY.md"
    padded = "# Notes" + " " * 200_000 + "x\n"
    doc.write_text(doc.read_text(encoding="utf-8") + "\n" + padded * 2, encoding="utf-8")

    # A deadline, not a speed bound: the old pattern needs days here, the new one milliseconds.
    done = subprocess.run(
        [sys.executable, "-c", _BOTH, str(repo)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )

    assert done.returncode == 0, done.stderr[-2000:]
    graded, previewed = json.loads(done.stdout)
    assert graded == previewed
    assert graded.startswith("REPLAY.md covers 6/6 topics"), graded  # the sample's doc is still read whole


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("Recording date", "Recording date"),
        ("Recording date ##", "Recording date"),
        ("Recording date   ###   ", "Recording date"),
        ("C#", "C#"),  # a closing run needs a blank before it (CommonMark)
        ("Notes#", "Notes#"),
        ("###", ""),
        ("What replay proves\t#", "What replay proves"),
    ],
)
def test_a_headings_closing_hashes_are_left_out_as_markdown_does(text: str, title: str) -> None:
    assert _title(text) == title
