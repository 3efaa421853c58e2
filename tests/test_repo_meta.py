"""The promises the repository makes to a newcomer: the quick start and CI agree, the layout exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _quick_start_lines() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README's Quick start has no ```sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_has_exactly_two_lines() -> None:
    lines = _quick_start_lines()
    assert len(lines) == 2, lines
    assert "grade sample_solution" in lines[0]
    assert "pytest" in lines[1]


def test_ci_runs_readme_test_line_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert _quick_start_lines()[1] in ci.splitlines()


def test_top_level_layout() -> None:
    names = ("template", "grader", "rubric", "sample_solution", "tests", "docs", "noxfile.py", "README.md")
    for name in names:
        assert (ROOT / name).exists(), name
