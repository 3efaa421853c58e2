"""A suite run with Python's optimizations on (red team 31, k6a/k6b): `python -O` or PYTHONOPTIMIZE compiles
every `assert` out, and with `--assert=plain` pytest does not rewrite the test modules' asserts either, so a
failing test passes. The guard reports the interpreter's -O level; the grader runs the whole suite again in
a plain interpreter and counts what fails there."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adversarial.builders import commit, sample_copy

FAILING = (
    "from support_triage_agent.agent import INTENTS\n\n\n"
    "def test_feedback_is_an_intent():\n    assert 'feedback' in INTENTS\n"
)

RECIPES = {
    "python -O": "\tCASSETTE_MODE=replay $(PYTHON) -O -m pytest --assert=plain\n",
    "PYTHONOPTIMIZE": "\tPYTHONOPTIMIZE=1 CASSETTE_MODE=replay $(PYTHON) -m pytest -p no:cacheprovider\n",
}


def _with_recipe(repo: Path, form: str) -> None:
    makefile = repo / "Makefile"
    text = makefile.read_text(encoding="utf-8")
    old = "\tCASSETTE_MODE=replay $(PYTHON) -m pytest\n"
    assert old in text
    makefile.write_text(text.replace(old, RECIPES[form]), encoding="utf-8")
    if form == "PYTHONOPTIMIZE":
        pyproject = repo / "pyproject.toml"
        toml = pyproject.read_text(encoding="utf-8")
        assert 'addopts = "-ra"' in toml
        pyproject.write_text(
            toml.replace('addopts = "-ra"', 'addopts = "-ra --assert=plain"'), encoding="utf-8"
        )


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(RECIPES))
def test_a_failing_test_hidden_by_compiled_out_asserts_counts_as_failed(
    form: str, tmp_path: Path, grade_cache: Path
) -> None:
    """55/57 against 50/57 for the twin whose `make test` ran its asserts: the attack now loses what the twin
    loses, and the evidence says why the suite was run again."""
    from grader.grading import grade
    from grader.rubric import load_rubric

    repo = sample_copy(tmp_path / "cand")
    (repo / "tests" / "test_regressions.py").write_text(FAILING, encoding="utf-8")
    _with_recipe(repo, form)
    commit(repo, "take-home submission")

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=1)

    rows = {r["id"]: r for r in report["rows"]}
    replay = rows["offline-replay"]
    assert replay["score"] <= 2, replay
    assert "tests/test_regressions.py::test_feedback_is_an_intent" in replay["evidence"], replay["evidence"]
    assert "assert statements were compiled out" in replay["evidence"], replay["evidence"]
    assert "test failed" in rows["make-targets"]["evidence"], rows["make-targets"]
