"""`extends: BASE`: a rubric that is another one with a few keys changed (rubric/rehearsal.yaml is one).

Merging rules, file:line errors in whichever file holds the problem, and the resolved copy a stored run keeps.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml

from grader.checks import CheckResult
from grader.errors import BadInput
from grader.rubric import load_rubric, score
from grader.schemas import load_schema
from tests.test_rubric import CHECKS, GOOD

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "rubric" / "default.yaml"
REHEARSAL = REPO / "rubric" / "rehearsal.yaml"
_LOOPBACK_CLAUSE = " and loopback_tapes == 0"


def _files(tmp_path: Path, child: str, base: str = GOOD) -> Path:
    (tmp_path / "base.yaml").write_text(textwrap.dedent(base), encoding="utf-8")
    path = tmp_path / "child.yaml"
    path.write_text(textwrap.dedent(child), encoding="utf-8")
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(BadInput) as info:
        load_rubric(path, checks=CHECKS)
    return list(info.value.problems) or [str(info.value)]


# ------------------------------------------------------------------------------ the rehearsal rubric


def test_rehearsal_rubric_is_the_default_with_only_the_loopback_cap_lifted():
    """Kept in step by construction (it extends default.yaml); this pins that nothing else differs, so a row
    added to or changed in default.yaml reaches the rehearsal rubric too."""
    default, rehearsal = load_rubric(DEFAULT), load_rubric(REHEARSAL)
    assert rehearsal.name != default.name and "rehearsal" in rehearsal.name
    assert (rehearsal.scale, rehearsal.thresholds) == (default.scale, default.thresholds)
    assert [r.id for r in rehearsal.rows] == [r.id for r in default.rows]
    for mine, theirs in zip(rehearsal.rows, default.rows, strict=True):
        if mine.id != "model-metadata":
            assert mine == theirs, mine.id
            continue
        assert (mine.title, mine.weight, mine.check, mine.evidence) == (
            theirs.title,
            theirs.weight,
            theirs.check,
            theirs.evidence,
        )
        assert {k: v for k, v in mine.levels.items() if k != 3} == {
            k: v for k, v in theirs.levels.items() if k != 3
        }
        assert _LOOPBACK_CLAUSE in theirs.levels[3], "the default rubric must cap a loopback recording"
        assert mine.levels[3] == theirs.levels[3].replace(_LOOPBACK_CLAUSE, "")
        # Its level 3 is its own line; the other levels point into default.yaml.
        assert mine.where(3).startswith(f"{REHEARSAL}:") and mine.where(2).startswith(f"{DEFAULT}:")


def test_the_resolved_copy_stands_alone_and_is_what_the_sha256_names(tmp_path):
    rehearsal = load_rubric(REHEARSAL)
    assert rehearsal.sha256 == hashlib.sha256(rehearsal.source).hexdigest()
    assert b"extends" not in rehearsal.source.split(b"\n", 1)[1]
    copy = tmp_path / "elsewhere" / "rubric.yaml"  # no default.yaml beside it
    copy.parent.mkdir()
    copy.write_bytes(rehearsal.source)
    again = load_rubric(copy)
    assert again.sha256 == rehearsal.sha256 and again.name == rehearsal.name
    assert [(r.id, r.levels, r.weight, r.evidence) for r in again.rows] == [
        (r.id, r.levels, r.weight, r.evidence) for r in rehearsal.rows
    ]


def test_a_plain_rubric_keeps_its_own_bytes():
    default = load_rubric(DEFAULT)
    assert default.source == DEFAULT.read_bytes()
    assert default.sha256 == hashlib.sha256(DEFAULT.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------ merging rules


def test_a_row_is_merged_key_by_key_and_its_levels_level_by_level(tmp_path):
    path = _files(
        tmp_path,
        """\
        version: 1
        name: Child
        extends: base.yaml
        thresholds:
          extra: 7
        rows:
          - id: offline
            weight: 1
            levels:
              3: passed > 0
          - id: bigger
            title: A new row
            weight: 2
            check: sizes
            levels:
              3: total_mb <= thresholds.extra
              0: true
        """,
    )
    rubric = load_rubric(path, checks=CHECKS)
    assert rubric.name == "Child" and rubric.thresholds == {"max_mb": 2, "extra": 7}
    assert [r.id for r in rubric.rows] == ["offline", "small", "bigger"]
    offline = rubric.rows[0]
    assert offline.weight == 1 and offline.title == "Replays offline"
    assert offline.levels == {3: "passed > 0", 1: "passed > 0", 0: "true"}
    assert offline.where(3) == f"{path}:10" and offline.where(1) == f"{tmp_path / 'base.yaml'}:13"
    scored = score(rubric, {"replay": CheckResult(facts={"passed": 1, "failed": 5, "network_attempts": 0})})
    assert scored[0].score == 3  # the child's level 3, not the base's


def test_a_problem_in_the_child_points_at_the_child_and_one_in_the_base_at_the_base(tmp_path):
    base = GOOD.replace("weight: 2", "weight: -2")  # row 'small' in the base
    path = _files(
        tmp_path,
        """\
        version: 1
        name: Child
        extends: base.yaml
        rows:
          - id: offline
            levels:
              3: passd > 0
        """,
        base=base,
    )
    problems = _problems(path)
    assert problems[0].startswith(f"{path}:7: row 'offline' level 3: 'passd' is not a fact of this check")
    assert problems[1].startswith(
        f"{tmp_path / 'base.yaml'}:18: row 'small': weight must be a positive number"
    )
    assert len(problems) == 2


@pytest.mark.parametrize(
    ("child", "expected"),
    [
        ("version: 1\nname: C\nextends: nope.yaml\n", r"child\.yaml:3: extends: .*nope\.yaml not found"),
        ("version: 1\nname: C\nextends: [a]\n", r"child\.yaml:3: extends must be the path of a rubric file"),
        ("version: 1\nname: C\nextends: child.yaml\n", r"child\.yaml:3: extends: child\.yaml leads back"),
        ("version: 1\nextends: base.yaml\n", r"child\.yaml:1: a rubric with extends: needs its own 'name'"),
        (
            "version: 1\nname: C\nextends: base.yaml\nrows:\n  - id: small\n    wieght: 1\n",
            r"child\.yaml:6: unknown key 'wieght' in row 'small' \(did you mean 'weight'\?\)",
        ),
        (
            "version: 1\nname: C\nextends: base.yaml\nrows:\n  - id: small\n    weight: 1\n"
            "  - id: small\n    weight: 2\n",
            r"child\.yaml:7: duplicate row id 'small' \(first defined on line 5\)",
        ),
    ],
)
def test_extends_problems_are_one_line_with_file_and_line(tmp_path, child, expected):
    path = _files(tmp_path, child)
    problems = _problems(path)
    assert re.search(expected, problems[0]), problems


def test_a_loop_through_two_files_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("version: 1\nname: A\nextends: b.yaml\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("version: 1\nname: B\nextends: a.yaml\n", encoding="utf-8")
    problems = _problems(tmp_path / "a.yaml")
    assert problems == [
        f"{tmp_path / 'b.yaml'}:3: extends: a.yaml leads back to this file (a loop of extends)"
    ]


# --------------------------------------------------------------------------------- through the CLI


def test_grade_refuses_a_broken_extending_rubric_with_exit_2_and_file_line(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        f"version: 1\nname: Mine\nextends: {DEFAULT}\nrows:\n  - id: model-metadata\n    levels:\n"
        "      3: tapes > 0 and with_modle == tapes\n",
        encoding="utf-8",
    )
    target = tmp_path / "target"
    target.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "grader", "--rubric", str(path), str(target)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert (
        f"{path}:7: row 'model-metadata' level 3: 'with_modle' is not a fact of this check" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_the_rehearsal_rubric_ships_beside_the_default_in_the_wheel():
    """A wheel puts default.yaml in grader/_rubric/; rehearsal.yaml's relative extends needs it beside it."""
    config = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    included = dict(re.findall(r'^"(rubric/[^"]+)" = "([^"]+)"', config, flags=re.MULTILINE))
    assert Path(included["rubric/rehearsal.yaml"]).parent == Path(included["rubric/default.yaml"]).parent
    assert yaml.safe_load(REHEARSAL.read_text(encoding="utf-8"))["extends"] == "default.yaml"


def test_the_rubric_schema_accepts_an_extending_rubric_and_still_rejects_a_plain_one_without_rows():
    validator = jsonschema.Draft202012Validator(load_schema("rubric"))
    rehearsal = json.loads(json.dumps(yaml.safe_load(REHEARSAL.read_text(encoding="utf-8"))))
    validator.validate(rehearsal)
    validator.validate(json.loads(json.dumps(yaml.safe_load(DEFAULT.read_text(encoding="utf-8")))))
    for broken in (
        {k: v for k, v in rehearsal.items() if k != "extends"},  # a partial row without extends
        {**rehearsal, "rows": [{"levels": {"3": "true"}}]},  # a row change needs its id
        {**rehearsal, "rows": [{"id": "model-metadata", "wieght": 1}]},
        {**rehearsal, "extends": ""},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)


def test_readme_and_guides_tell_the_same_story_about_the_samples_marks():
    """README line 1 grades the sample with the default rubric; the docs say what that gives and how to see
    full marks (tests/test_sample_solution.py proves both)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("```sh\n", 1)[1].split("```", 1)[0]
    first = block.splitlines()[0]
    assert first.endswith("grade sample_solution") and "--rubric" not in first
    show = "grade --rubric rubric/rehearsal.yaml sample_solution"
    for page in ("README.md", "docs/reviewer.md", "docs/rubric.md"):
        text = " ".join((REPO / page).read_text(encoding="utf-8").split())
        assert show in text.replace(".venv/bin/grade", "grade"), page
        assert "model-metadata 2" in text, page
