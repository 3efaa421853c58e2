"""Source the grader cannot parse is the submission's problem, never a lever: a file of 200,000 chained
``+`` crashed three static checks, and a crashed check used to leave the total (a red-team pass took a
submission with twelve failing tests from 45/54 to 33/33)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grader import pysource
from grader.tamper import scan
from tests.adversarial.builders import commit, sample_copy

DEEP = "TABLE = " + "+".join(["1"] * 200_000) + "\n"


def test_deep_source_is_a_syntax_error_not_a_crash() -> None:
    with pytest.raises(SyntaxError, match="nested"):
        pysource.parse(DEEP)
    with pytest.raises(SyntaxError, match="nested"):
        pysource.parse("x = " + "-" * 300 + "1\n")  # parses, but deeper than a recursive visitor should go
    assert pysource.parse("def f(a):\n    return [a, {'k': (a, a)}]\n").body


def test_a_conftest_the_grader_cannot_parse_counts_as_a_hook(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(DEEP + "def pytest_runtest_call(item):\n    pass\n")
    (tmp_path / "tests" / "helper.py").write_text(DEEP)  # not loaded by pytest as a plugin: no hook
    hooks = scan(tmp_path).hooks
    assert [(h.kind, h.location) for h in hooks] == [("unreadable", "tests/conftest.py:1")]


@pytest.mark.slow
@pytest.mark.index
def test_a_file_built_to_crash_the_static_checks_leaves_no_row_out_of_the_total(
    tmp_path: Path, grade_cache: Path
) -> None:
    from grader.grading import grade
    from grader.rubric import load_rubric

    repo = sample_copy(tmp_path / "deep")
    (repo / "tools").mkdir(exist_ok=True)
    (repo / "tools" / "gen_fixture.py").write_text(DEEP)
    (repo / "tests" / "test_really_fails.py").write_text(
        textwrap.dedent(
            """
            def test_a_real_failure():
                assert 1 == 2
            """
        )
    )
    report = grade(str(commit(repo)), rubric=load_rubric(), timeout=120, cache_root=grade_cache)

    statuses = {row["id"]: row["status"] for row in report["rows"]}
    assert all(status == "scored" for status in statuses.values()), statuses
    offline = next(row for row in report["rows"] if row["id"] == "offline-replay")
    assert offline["score"] <= 2 and "1 failed" in offline["evidence"], offline
    assert report["total"]["points"] < report["total"]["max"]
