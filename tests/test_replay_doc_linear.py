"""replay-doc reads a REPLAY.md in time proportional to its size, whatever its lines hold (red team 6, H3).

The heading rule was `^\\s{0,3}(#{1,6})\\s+(.*?)\\s*#*\\s*$`: on one heading line padded with blanks and
ending in another character it backtracked polynomially (4.5 KB of blanks: 132 s in the grader's own
process, past `--timeout` and `--budget`; a 500 KB file, days). The rule now matches the line once and the
closing #s are taken off in code, by the grader and by the candidate's `make check` alike.

Red team 7, R7-1: two topic headings had an unbounded `.*` between two words (`what .* shows`,
`proves .* not`); a heading of `what ` 110,000 times took 252 s in the grader's own process, past the
grade's budget, so the probes after it never ran. Every pattern of the rule file is now fuzzed with lines
built from its own words, repeated, and no terminator.
"""

from __future__ import annotations

import json
import re
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


def test_a_heading_of_one_repeated_word_is_read_at_once_by_the_grader_and_make_check(tmp_path: Path) -> None:
    repo = tmp_path / "sub"
    shutil.copytree(SAMPLE, repo, ignore=shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache"))
    doc = repo / "REPLAY.md"
    lines = "## " + "what " * 40_000 + "\n\n## " + "proves " * 30_000 + "\n"
    doc.write_text(doc.read_text(encoding="utf-8") + "\n" + lines, encoding="utf-8")

    # A deadline, not a speed bound: with the old patterns this takes minutes, now well under a second.
    done = subprocess.run(
        [sys.executable, "-c", _BOTH, str(repo)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr[-2000:]
    graded, previewed = json.loads(done.stdout)
    assert graded == previewed
    assert graded.startswith("REPLAY.md covers 6/6 topics"), graded


# Every pattern of the rule file searched in lines made of its own words (and a few separators), each
# repeated with and without a blank and never completed: a pattern that backtracks over the line from each
# start is quadratic here (minutes); linear ones take milliseconds. Run in a child the test can stop.
_FUZZ = """
import json, re, sys
def patterns(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from patterns(item)
    elif isinstance(value, list):
        for item in value:
            yield from patterns(item)
    elif isinstance(value, str):
        try:
            yield re.compile(value, re.IGNORECASE)
        except re.error:
            pass
rules = json.load(open(sys.argv[1], encoding="utf-8"))
count = 0
for rx in patterns(rules):
    words = set(re.findall(r"[A-Za-z']{2,}", rx.pattern)) | {"#", " ", "-", "|", "`", "*", "(", "1"}
    for word in sorted(words):
        for unit in (word + " ", word):
            rx.search(unit * (40_000 // len(unit)))
            count += 1
print(count)
"""


def test_every_replay_doc_pattern_is_linear_on_its_own_words_repeated() -> None:
    rules = ROOT / "grader" / "rules" / "replay_doc.json"
    done = subprocess.run(
        [sys.executable, "-c", _FUZZ, str(rules)], cwd=ROOT, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) > 500  # every pattern was tried, not skipped
    # No unbounded wildcard left in a pattern searched from every start (the heading rule is matched once).
    texts = re.findall(r'"((?:[^"\\\\]|\\\\.)*)"', rules.read_text(encoding="utf-8"))
    assert not [t for t in texts if not t.startswith("^") and re.search(r"\.\*|\.\+", t)]
