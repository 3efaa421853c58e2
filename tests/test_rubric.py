"""Rubric YAML: validation with exact file:line errors, sandboxed expressions, scoring and totals."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from grader.checks import Check, CheckResult, Finding
from grader.errors import BadInput
from grader.rubric import RowScore, load_rubric, score, totals

REPO = Path(__file__).resolve().parents[1]


def _fake_check(check_id: str, *facts: str) -> Check:
    def check(ctx):
        return CheckResult(facts={})

    check.__doc__ = f"Fake {check_id}.\n\nFacts:\n" + "".join(
        f"    {name}: {name} meaning\n" for name in facts
    )
    return Check.from_function(check_id, check)


# Test-local checks: the engine is tested without the real (still growing) registry.
CHECKS = {
    "replay": _fake_check("replay", "passed", "failed", "errors", "network_attempts", "timed_out"),
    "sizes": _fake_check("sizes", "tapes", "total_mb", "names"),
}

# The facts each default-rubric row reads; the real checks must provide at least these.
GOOD = """\
version: 1
name: Test rubric
scale: [0, 3]
thresholds:
  max_mb: 2
rows:
  - id: offline
    title: Replays offline
    weight: 3
    check: replay
    levels:
      3: passed > 0 and failed == 0 and network_attempts == 0
      1: passed > 0
      0: true
    evidence: "{{ passed }} passed,   {{ failed }} failed"
  - id: small
    title: Tapes are small
    weight: 2
    check: sizes
    levels:
      3: total_mb <= thresholds.max_mb
      0: true
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rubric.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(BadInput) as info:
        load_rubric(path, checks=CHECKS)
    message = str(info.value)
    assert "\n" not in message
    return message.removeprefix(f"{path}:")


def _good_with(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


# ------------------------------------------------------------------------------------------ loading


def test_good_rubric_loads_with_rows_in_order_and_file_hash(tmp_path):
    path = _write(tmp_path, GOOD)
    rubric = load_rubric(path, checks=CHECKS)
    assert rubric.name == "Test rubric"
    assert rubric.version == 1
    assert rubric.scale == (0, 3) and rubric.max == 3
    assert rubric.thresholds == {"max_mb": 2}
    assert [row.id for row in rubric.rows] == ["offline", "small"]
    assert rubric.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    offline = rubric.rows[0]
    assert offline.line == 7
    assert list(offline.levels) == [3, 1, 0]
    assert offline.levels[0] == "true"  # a bare YAML true is that expression
    assert offline.level_lines == {3: 12, 1: 13, 0: 14}
    assert rubric.rows[1].evidence == "{{ summary }}"  # the default evidence
    assert rubric.reference() == {"name": "Test rubric", "sha256": rubric.sha256, "path": str(path)}


def test_default_rubric_is_found_next_to_the_package_and_loads():
    # The real registry: a row naming a fact its check does not document fails here, not at grading time.
    rubric = load_rubric()
    assert rubric.path == REPO / "rubric" / "default.yaml"
    assert [row.id for row in rubric.rows] == [
        "offline-replay", "no-credentials", "loud-miss", "model-metadata", "cassette-hygiene",
        "canonical-keys", "make-targets", "replay-doc", "transport-boundary", "model-drift",
    ]  # fmt: skip
    assert {"cassette_total_mb", "cassette_largest_mb"} <= set(rubric.thresholds)


def test_default_rubric_loads_with_the_real_registry():
    # The integration point: every default row's check exists and documents every fact the row reads.
    rubric = load_rubric()
    assert len(rubric.rows) == 10


def test_missing_file_is_one_clear_line(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(BadInput, match=r"nope\.yaml: rubric file not found"):
        load_rubric(missing, checks=CHECKS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 1\nname: x\nrows:\n  - id: a\n    title: [unclosed\n", "6: YAML syntax error"),
        ("version: 1\nname: x\nrows: {a: 1\n", "4: YAML syntax error"),
        ("", "1: the rubric is empty"),
    ],
)
def test_yaml_syntax_errors_name_the_line(tmp_path, text, expected):
    assert _error(tmp_path, text).startswith(expected)


def test_unknown_top_level_key(tmp_path):
    message = _error(tmp_path, _good_with("thresholds:", "treshold: 1\nthresholds:"))
    assert message.startswith(
        "4: unknown key 'treshold' in the rubric; allowed: extends, name, rows, scale, thresholds"
    )


def test_unknown_row_key(tmp_path):
    message = _error(tmp_path, _good_with("    weight: 2\n", "    wieght: 2\n    weight: 2\n"))
    assert message.startswith("18: unknown key 'wieght' in row 'small'; allowed: check, evidence, id,")


def test_duplicate_key_in_a_row(tmp_path):
    message = _error(tmp_path, _good_with("    weight: 2\n", "    weight: 2\n    weight: 5\n"))
    assert message.startswith("19: duplicate key 'weight' in a row")


def test_missing_required_row_key_points_at_the_row(tmp_path):
    message = _error(tmp_path, _good_with("    check: sizes\n", ""))
    assert message == "16: row 'small' is missing the required key 'check'"


def test_missing_required_top_level_key(tmp_path):
    message = _error(tmp_path, GOOD.replace("name: Test rubric\n", ""))
    assert message == "1: the rubric is missing the required key 'name'"


def test_unsupported_version(tmp_path):
    assert _error(tmp_path, GOOD.replace("version: 1", "version: 2")) == (
        "1: unsupported rubric version 2; use version: 1"
    )


def test_duplicate_row_id_names_both_lines(tmp_path):
    message = _error(tmp_path, GOOD.replace("- id: small", "- id: offline"))
    assert message == "16: duplicate row id 'offline' (first defined on line 7)"


def test_unknown_check_lists_the_known_ones(tmp_path):
    message = _error(tmp_path, _good_with("check: sizes", "check: size"))
    assert message == "19: row 'small': unknown check 'size'; known checks: replay, sizes"


def test_a_name_the_check_does_not_provide(tmp_path):
    message = _error(tmp_path, _good_with("1: passed > 0", "1: passd > 0"))
    assert message == (
        "13: row 'offline' level 1: 'passd' is not a fact of this check; "
        "facts: errors, failed, network_attempts, passed, summary, timed_out, thresholds"
    )


def test_evidence_is_validated_like_levels(tmp_path):
    message = _error(tmp_path, _good_with("{{ failed }} failed", "{{ fails }} failed"))
    assert message.startswith("15: row 'offline' evidence: 'fails' is not a fact of this check")


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("().__class__", "the attribute '__class__' starts with an underscore"),
        ("passed.__globals__", "the attribute '__globals__' starts with an underscore"),
        ("range(10**9)", "function calls are not allowed"),
        ("passed ** 99999999", "'**' is not allowed"),
        ("passed['_secret']", "the key '_secret' starts with an underscore"),
        ("_private > 0", "the name '_private' starts with an underscore"),
        ("passed[failed]", "only a literal key may index a value"),
        ("passed|attr('x')", "the filter 'attr' is not allowed"),
        ("(passed|map('x'))", "the filter 'map' is not allowed"),
        ("passed is sameas passed", "the test 'sameas' is not allowed"),
        ("{'a': 1}", "dict syntax is not allowed"),
    ],
)
def test_unsafe_expressions_are_refused_at_load(tmp_path, expression, problem):
    message = _error(tmp_path, _good_with("1: passed > 0", f'1: "{expression}"'))
    assert message.startswith(f"13: row 'offline' level 1: unsafe expression: {problem}")


def test_unsafe_evidence_template_is_refused(tmp_path):
    message = _error(tmp_path, _good_with('"{{ passed }} passed', '"{% set x = 1 %}{{ passed }} passed'))
    assert message.startswith("15: row 'offline' evidence: unsafe expression: assign syntax is not allowed")


def test_statement_smuggled_into_an_expression_is_a_syntax_error(tmp_path):
    message = _error(tmp_path, _good_with("1: passed > 0", '1: "passed }}{% for x in y %}{{ passed"'))
    assert message.startswith("13: row 'offline' level 1: invalid expression:")


@pytest.mark.parametrize("weight", ["0", "-1", "three", "true", ".nan"])
def test_bad_weight(tmp_path, weight):
    message = _error(tmp_path, _good_with("weight: 2", f"weight: {weight}"))
    assert message.startswith("18: row 'small': weight must be a positive number; got ")


def test_fractional_weight_is_fine(tmp_path):
    rubric = load_rubric(_write(tmp_path, _good_with("weight: 2", "weight: 0.5")), checks=CHECKS)
    assert rubric.rows[1].weight == 0.5


def test_lowest_level_must_exist(tmp_path):
    message = _error(tmp_path, _good_with("      0: true\n    evidence", "    evidence"))
    assert message == "11: row 'offline': level 0 is missing; add `0: true` as the fallback"


def test_level_outside_the_scale(tmp_path):
    message = _error(tmp_path, _good_with("3: passed > 0 and", "4: passed > 0 and"))
    assert message == "12: row 'offline': level '4' is outside the scale 0-3"


def test_level_within_a_custom_scale(tmp_path):
    text = _good_with("scale: [0, 3]", "scale: [0, 5]").replace("3: passed > 0 and", "5: passed > 0 and")
    rubric = load_rubric(_write(tmp_path, text), checks=CHECKS)
    assert rubric.max == 5 and list(rubric.rows[0].levels) == [5, 1, 0]


def test_level_must_be_an_expression_string(tmp_path):
    message = _error(tmp_path, _good_with("1: passed > 0", "1: 7"))
    assert message == "13: row 'offline': level 1 must be a Jinja2 expression string"


def test_undefined_threshold(tmp_path):
    message = _error(tmp_path, _good_with("thresholds.max_mb", "thresholds.max_size"))
    assert message == "21: row 'small' level 3: thresholds.max_size is not defined under thresholds: (max_mb)"


def test_bad_scale_and_threshold_values(tmp_path):
    assert _error(tmp_path, _good_with("scale: [0, 3]", "scale: [3, 0]")).startswith(
        "3: scale must be [lowest, highest] whole numbers like [0, 3]; got [3, 0]"
    )
    assert _error(tmp_path, _good_with("max_mb: 2", "max_mb: big")) == (
        "5: threshold 'max_mb' must be a number; got 'big'"
    )


def test_several_problems_show_the_first_and_count_the_rest(tmp_path):
    text = GOOD.replace("version: 1", "version: 3").replace("check: sizes", "check: nope")
    message = _error(tmp_path, text)
    assert message.startswith("1: unsupported rubric version 3")
    assert message.endswith("(and 1 more problem)")


# ------------------------------------------------------------------------------------------ scoring


def _rubric(tmp_path, text=GOOD):
    return load_rubric(_write(tmp_path, text), checks=CHECKS)


def _replay(**facts) -> CheckResult:
    base = {"passed": 4, "failed": 0, "errors": 0, "network_attempts": 0, "timed_out": False, "summary": "s"}
    return CheckResult(facts={**base, **facts})


def _by_id(rows: list[RowScore]) -> dict[str, RowScore]:
    return {row.id: row for row in rows}


def test_first_true_level_from_the_top_wins_and_evidence_is_rendered(tmp_path):
    rubric = _rubric(tmp_path)
    sizes = CheckResult(facts={"tapes": 3, "total_mb": 1.5, "names": [], "summary": "3 tapes, 1.5 MB"})
    rows = score(rubric, {"replay": _replay(), "sizes": sizes})
    assert [r.id for r in rows] == ["offline", "small"]
    assert rows[0].as_dict() == {
        "id": "offline",
        "title": "Replays offline",
        "weight": 3,
        "score": 3,
        "max": 3,
        "auto": True,
        "status": "scored",
        "evidence": "4 passed, 0 failed",  # whitespace collapsed
        "details": [],
    }
    assert (rows[1].score, rows[1].evidence) == (3, "3 tapes, 1.5 MB")

    assert score(rubric, {"replay": _replay(failed=2), "sizes": sizes})[0].score == 1
    assert score(rubric, {"replay": _replay(passed=0), "sizes": sizes})[0].score == 0
    big = CheckResult(facts={**sizes.facts, "total_mb": 2.01})
    assert score(rubric, {"replay": _replay(), "sizes": big})[1].score == 0  # thresholds.max_mb is 2


def test_manual_and_not_assessable_rows(tmp_path):
    rubric = _rubric(tmp_path)
    manual = CheckResult(
        facts={"summary": "x"},
        findings=[Finding(rule="big-tape", message="4.2 MB", location="cassettes/a.json:1")],
        details=["3 tapes"],
        manual="open cassettes/a.json and judge",
    )
    broken = CheckResult(facts={}, manual="ignored", not_assessable="install failed: index unreachable")
    rows = _by_id(score(rubric, {"replay": broken, "sizes": manual}))
    assert rows["small"].as_dict() | {"title": ""} == {
        "id": "small",
        "title": "",
        "weight": 2,
        "score": None,
        "max": 3,
        "auto": False,
        "status": "manual",
        "evidence": "open cassettes/a.json and judge",
        "details": ["3 tapes", "cassettes/a.json:1: 4.2 MB"],
    }
    assert rows["offline"].status == "not-assessable"
    assert rows["offline"].score is None
    assert rows["offline"].evidence == "not assessable: install failed: index unreachable"


def test_a_check_that_did_not_run_is_not_assessable(tmp_path):
    rows = score(_rubric(tmp_path), {"replay": _replay()})
    assert rows[1].status == "not-assessable"
    assert rows[1].evidence == "not assessable: check 'sizes' did not run"


def test_evaluation_errors_make_the_row_not_assessable_with_its_line(tmp_path):
    rubric = _rubric(tmp_path)
    path = rubric.path
    rows = score(
        rubric, {"replay": _replay(passed=None), "sizes": CheckResult(facts={"summary": "no total"})}
    )
    offline, small = rows
    assert offline.status == "not-assessable" and offline.score is None
    assert offline.evidence.startswith(f"not assessable: row 'offline' ({path}:12) level 3: TypeError: ")
    # A fact the check documents but did not report: StrictUndefined, not a silent false.
    assert small.evidence.startswith(f"not assessable: row 'small' ({path}:21) level 3: UndefinedError: ")
    assert "'total_mb' is undefined" in small.evidence


def test_evidence_render_error_is_not_assessable(tmp_path):
    rubric = _rubric(tmp_path)
    facts = {"tapes": 1, "total_mb": 0.1, "names": []}  # no summary to render
    row = score(rubric, {"replay": _replay(), "sizes": CheckResult(facts=facts)})[1]
    assert row.status == "not-assessable"
    assert row.evidence.startswith(f"not assessable: row 'small' ({rubric.path}:16) evidence: UndefinedError")


def test_no_true_level_is_not_assessable(tmp_path):
    rubric = _rubric(
        tmp_path, _good_with("      0: true\n    evidence", "      0: passed > 100\n    evidence")
    )
    row = score(rubric, {"replay": _replay(passed=0)})[0]
    assert row.status == "not-assessable"
    assert (
        row.evidence == f"not assessable: no level of row 'offline' ({rubric.path}:7) is true for these facts"
    )


def test_string_repetition_is_refused_at_run_time(tmp_path):
    rubric = _rubric(tmp_path, _good_with("1: passed > 0", "1: (summary * passed) | length > 0"))
    row = score(rubric, {"replay": _replay(failed=1, passed=10**9, summary="x")})[0]
    assert row.status == "not-assessable"
    assert "SecurityError" in row.evidence


def test_numeric_multiplication_still_works(tmp_path):
    rubric = _rubric(tmp_path, _good_with("1: passed > 0", "1: passed * 2 == 8"))
    assert score(rubric, {"replay": _replay(failed=1)})[0].score == 1


# ------------------------------------------------------------------------------------------- totals


def _row(score_: int | None, weight: float, status: str = "scored") -> RowScore:
    return RowScore("r", "t", weight, score_, 3, status, "", [])


def test_totals_weight_scores_and_skip_unscored_rows():
    rows = [_row(3, 3), _row(1, 2), _row(None, 5, "manual"), _row(None, 1, "not-assessable")]
    assert totals(rows) == {"points": 11, "max": 15, "percent": 73.3}


def test_totals_with_fractional_weights_and_no_rows():
    assert totals([_row(2, 0.5), _row(3, 1)]) == {"points": 4, "max": 4.5, "percent": 88.9}
    assert totals([]) == {"points": 0, "max": 0, "percent": 0}
    assert totals([_row(None, 2, "manual")]) == {"points": 0, "max": 0, "percent": 0}


def test_allowed_syntax_loads_and_evaluates(tmp_path):
    level = "1: failed is number and (failed + errors) | abs < 3 and thresholds['max_mb'] > 1"
    evidence = 'evidence: "{% if passed %}{{ passed }} ok{% else %}none{% endif %}"'
    text = _good_with("1: passed > 0", level).replace(
        'evidence: "{{ passed }} passed,   {{ failed }} failed"', evidence
    )
    row = score(_rubric(tmp_path, text), {"replay": _replay(failed=1)})[0]
    assert (row.status, row.score, row.evidence) == ("scored", 1, "4 ok")
