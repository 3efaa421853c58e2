"""docs/architecture.md's "Add a check" recipe, followed to the letter: its example check module and rubric
row are taken from the page, registered, documented and graded end to end through `grade()`."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import grader.checks as checks
from grader.checks import catalogue, registry
from grader.checks.__main__ import docs_section, with_catalogue
from grader.errors import BadInput
from grader.grading import grade
from grader.rubric import load_rubric
from tests.conftest import MakeSubmission
from tests.helpers.context import folder_context

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"


def _recipe() -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("## Add a check (five steps)")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _block(lang: str) -> str:
    blocks = re.findall(rf"```{lang}\n(.*?)```", _recipe(), flags=re.DOTALL)
    assert len(blocks) == 1, f"the recipe should hold exactly one {lang} block"
    return blocks[0]


@pytest.fixture
def example_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Step 1 and 2: the page's module, imported as grader.checks.<name> would be (which registers it),
    into a copy of the real registry that the test leaves behind."""
    monkeypatch.setattr(checks, "_REGISTRY", dict(registry()))
    path = tmp_path / "readme_example.py"
    path.write_text(_block("python"), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("grader.checks.readme_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    yield module


def _rubric(tmp_path: Path) -> Path:
    """Step 3: a rubric holding the page's row (and a static row of the shipped checks beside it)."""
    path = tmp_path / "rubric.yaml"
    path.write_text(
        "version: 1\nname: Recipe rubric\nscale: [0, 3]\nrows:\n"
        + _block("yaml")
        + "  - id: replay-doc\n    title: REPLAY.md\n    weight: 1\n    check: replay-doc\n"
        '    levels:\n      3: exists\n      0: true\n    evidence: "{{ summary }}"\n',
        encoding="utf-8",
    )
    return path


def test_the_example_check_registers_with_its_facts_and_the_default_schedule(example_check):
    check = registry()["readme"]
    assert check.summary == "The repository has a README at its root."
    assert set(check.facts) == {"has_readme", "readme_lines", "summary"}
    assert (check.phase, check.probes) == ("normal", None)


def test_the_example_check_reads_a_folder(example_check, tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    result = example_check.readme(folder_context(repo))
    assert result.facts["has_readme"] is False
    assert [f.rule for f in result.findings] == ["no-readme"]

    (repo / "README.md").write_text("# Title\n\nOne.\nTwo.\n", encoding="utf-8")
    result = example_check.readme(folder_context(repo))
    assert result.facts == {
        "has_readme": True,
        "readme_lines": 3,
        "summary": "README.md has 3 non-blank lines",
    }


def test_a_readme_that_is_a_link_is_not_read(example_check, tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").symlink_to("/etc/passwd")
    assert example_check.readme(folder_context(repo)).facts["has_readme"] is False


def test_the_regenerated_docs_list_the_example_check(example_check):
    # Step 4: what `python -m grader.checks --update-docs docs/rubric.md` writes into the page.
    page = (REPO / "docs" / "rubric.md").read_text(encoding="utf-8")
    updated = docs_section(with_catalogue(page, catalogue("markdown")))
    assert updated is not None
    assert "### `readme`" in updated
    assert "| `readme_lines` | its number of non-blank lines (0 without one) |" in updated


def test_the_rubric_row_is_validated_against_the_example_checks_facts(example_check, tmp_path: Path):
    rubric = load_rubric(_rubric(tmp_path))
    assert [row.check for row in rubric.rows] == ["readme", "replay-doc"]

    path = _rubric(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace("readme_lines >= 5", "lines >= 5"))
    with pytest.raises(BadInput, match=r"rubric\.yaml:\d+: row 'has-readme' level 3: 'lines' is not a fact"):
        load_rubric(path)


@pytest.mark.index
@pytest.mark.slow
def test_the_example_check_scores_its_row_end_to_end(
    example_check, tmp_path: Path, make_submission: MakeSubmission, grade_cache: Path
):
    # Step 5: the real pipeline (acquire, install, checks, score) with a rubric that has the row.
    rubric = load_rubric(_rubric(tmp_path))
    documented = make_submission({"README.md": "# Triage\n\n" + "A line.\n" * 5}, name="documented")
    bare = make_submission({"main.py": "print('hi')\n"}, name="bare")

    good = grade(str(documented), rubric=rubric, timeout=120, cache_root=grade_cache)
    poor = grade(str(bare), rubric=rubric, timeout=120, cache_root=grade_cache)

    good_row = next(row for row in good["rows"] if row["id"] == "has-readme")
    poor_row = next(row for row in poor["rows"] if row["id"] == "has-readme")
    assert (good_row["score"], good_row["evidence"]) == (good_row["max"], "README.md has 6 non-blank lines")
    assert (poor_row["score"], poor_row["evidence"]) == (0, "no README at the repository root")
    assert good["facts"]["readme"]["readme_lines"] == 6
    assert poor["findings"][0]["rule"] == "no-readme"
