"""Baking the candidate template: each provider, hostile answers, the baked project's own offline tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cookiecutter.exceptions import FailedHookException

from tests.helpers.bake import bake, baked_venv, files_containing, run

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXPECTED = {
    "openai-compatible": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "gpt-4o-mini"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "claude-3-5-haiku-latest"),
}


def _settings(project: Path, package: str) -> dict[str, object]:
    namespace: dict[str, object] = {}
    source = (project / package / "_settings.py").read_text()
    exec(compile(source, "_settings.py", "exec"), namespace)  # noqa: S102 - the baked file, checked as code
    return namespace


@pytest.mark.parametrize("provider", sorted(EXPECTED))
def test_bake_renders_manifest_and_settings_per_provider(tmp_path: Path, provider: str) -> None:
    project = bake(tmp_path, project_name="Acme Triage", provider=provider)
    key_env, url_env, model = EXPECTED[provider]
    assert project.name == "acme-triage"

    manifest = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["takehome"]
    assert manifest == {
        "cassette_dir": "cassettes",
        "triage_command": ["python", "-m", "acme_triage"],
        "key_function": "acme_triage.cassette:key_for",
        "record_command": ["make", "record"],
        "api_key_env": key_env,
        "base_url_env": url_env,
    }
    settings = _settings(project, "acme_triage")
    assert (settings["PROVIDER"], settings["DEFAULT_MODEL"]) == (provider, model)

    answers = json.loads((project / ".cookiecutter.json").read_text())
    assert answers["provider"] == provider and answers["package_name"] == "acme_triage"
    assert str(tmp_path) not in (project / ".cookiecutter.json").read_text()  # no local paths committed
    # Nor the template's own path as the candidate typed it (cookiecutter's `_template`, `_output_dir`...).
    assert not [key for key in answers if key.startswith("_")], answers

    for name in (
        "Makefile",
        "REPLAY.md",
        "README.md",
        "data/tickets.jsonl",
        "cassettes/.gitkeep",
        "acme_triage/cassette.py",
        "tests/conftest.py",
        "tests/test_cassette.py",
        "tests/test_triage.py",
    ):
        assert (project / name).is_file(), name
    assert f"set {key_env} (and {url_env}" in (project / "Makefile").read_text()
    leftovers = [p for p in files_containing(project, "cookiecutter") if p.name != ".cookiecutter.json"]
    assert leftovers + files_containing(project, "{%") == [], "unrendered Jinja left in the baked project"
    tickets = [json.loads(line) for line in (project / "data/tickets.jsonl").read_text().splitlines()]
    assert len(tickets) >= 20
    assert {t["intent"] for t in tickets} == {
        "refund",
        "billing",
        "shipping",
        "technical",
        "account",
        "other",
    }


@pytest.mark.parametrize("provider", sorted(EXPECTED))
def test_baked_python_is_lint_and_format_clean(tmp_path: Path, provider: str) -> None:
    project = bake(tmp_path, provider=provider)
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    # The baked project's own [tool.ruff] config: what the candidate starts from is clean under it.
    check = subprocess.run([ruff, "check", "."], cwd=project, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    result = subprocess.run([ruff, "format", "--check", "."], cwd=project, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_quotes_in_answers_are_data(tmp_path: Path) -> None:
    name = "Ana \"Bobby'); DROP\" O'Brien \\ née Ærø"
    project = bake(
        tmp_path, candidate_name=name, project_name="Quote \"Test' Agent", project_slug="quote-test"
    )
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["authors"] == [{"name": name}]
    assert name in pyproject["project"]["description"]
    assert json.loads((project / ".cookiecutter.json").read_text())["candidate_name"] == name
    assert _settings(project, "quote_test")["PACKAGE"] == "quote_test"


@pytest.mark.parametrize(
    ("answers", "variable"),
    [
        ({"package_name": "my-pkg"}, "package_name"),
        ({"package_name": "class"}, "package_name"),
        ({"package_name": 'x"; import os; os.system("touch PWNED") #'}, "package_name"),
        ({"project_slug": "Bad Slug"}, "project_slug"),
        ({"default_model": "gpt 4o; rm -rf /"}, "default_model"),
        ({"candidate_name": "Eve\nInjected"}, "candidate_name"),
    ],
)
def test_bad_answers_are_refused_with_one_clear_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], answers: dict[str, str], variable: str
) -> None:
    with pytest.raises(FailedHookException):
        bake(tmp_path, **answers)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("cookiecutter: error:")]
    assert len(lines) == 1 and f"{variable}=" in lines[0] and "is not allowed" in lines[0], err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir()), "a refused bake left files behind"
    assert not (Path.cwd() / "PWNED").exists()


@pytest.fixture(scope="module")
def fresh_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake(tmp_path_factory.mktemp("fresh"), project_name="Fresh Triage")


@pytest.mark.index
@pytest.mark.slow
def test_fresh_bake_cassette_tests_pass_offline(fresh_project: Path) -> None:
    venv = baked_venv()
    print(f"baked venv: {venv.note}")
    result = run(
        ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cassette.py"],
        fresh_project,
        venv.env(),
        offline=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


@pytest.mark.index
@pytest.mark.slow
def test_fresh_bake_triage_tests_fail_loudly_until_recorded(fresh_project: Path, tmp_path: Path) -> None:
    venv = baked_venv()
    ledger = tmp_path / "misses.jsonl"
    result = run(["make", "test"], fresh_project, venv.env(CASSETTE_MISS_LOG=str(ledger)), offline=True)
    assert result.returncode != 0
    assert "CassetteMiss" in result.stdout and "run `make record`" in result.stdout
    assert "SocketBlockedError" not in result.stdout + result.stderr
    tickets = len((fresh_project / "data/tickets.jsonl").read_text().splitlines())
    assert f"{tickets} failed" in result.stdout
    assert len(ledger.read_text().splitlines()) == tickets
    # Nothing was ever recorded: there is no change to undo, only a recording to make.
    assert f"cassette: {tickets} miss(es); no tape is recorded yet; run `make record`" in result.stdout
    assert "undo the change" not in result.stdout


@pytest.mark.index
@pytest.mark.slow
def test_the_default_miss_ledger_holds_the_last_run_only(fresh_project: Path, tmp_path: Path) -> None:
    """docs/candidate.md: each pytest run starts cassettes/.misses.jsonl afresh; a named one is kept."""
    venv = baked_venv()
    tickets = len((fresh_project / "data/tickets.jsonl").read_text().splitlines())
    stale = json.dumps({"key": "0" * 16, "method": "POST", "path": "/old", "time": "2020-01-01T00:00:00Z"})
    default = fresh_project / "cassettes" / ".misses.jsonl"
    default.write_text(stale + "\n")
    result = run(["make", "test"], fresh_project, venv.env(), offline=True)
    assert result.returncode != 0
    misses = [json.loads(line) for line in default.read_text().splitlines()]
    assert len(misses) == tickets and all(m["path"] != "/old" for m in misses)
    assert f"cassette: {tickets} miss(es); " in result.stdout

    named = tmp_path / "kept.jsonl"
    named.write_text(stale + "\n")
    result = run(["make", "test"], fresh_project, venv.env(CASSETTE_MISS_LOG=str(named)), offline=True)
    assert result.returncode != 0
    assert named.read_text().splitlines()[0] == stale and len(named.read_text().splitlines()) == tickets + 1
    assert f"cassette: {tickets} miss(es); " in result.stdout  # the summary counts this run's misses only
    default.unlink()


@pytest.mark.index
@pytest.mark.slow
def test_fresh_bake_cli_exits_2_with_one_line_on_a_miss(fresh_project: Path) -> None:
    venv = baked_venv()
    result = run(
        ["python", "-m", "fresh_triage", "Where is my package?"], fresh_project, venv.env(), offline=True
    )
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("triage: error: cassette miss: no tape ") and "POST /v1/chat/completions" in line


@pytest.mark.index
@pytest.mark.slow
def test_fresh_bake_record_without_key_says_what_to_set(fresh_project: Path) -> None:
    venv = baked_venv()
    result = run(["make", "-s", "record"], fresh_project, venv.env())
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (
        "set OPENAI_API_KEY (and OPENAI_BASE_URL for a compatible endpoint) to record"
    )
    assert not list((fresh_project / "cassettes").glob("*.json"))


@pytest.mark.index
@pytest.mark.slow
def test_an_untouched_bake_earns_at_most_a_quarter_of_the_points(tmp_path: Path, grade_cache: Path) -> None:
    # Nothing recorded, REPLAY.md all TODO: rows whose property cannot be shown must not score because
    # nothing failed (issue: "nothing to grade earns nothing").
    from grader.grading import grade
    from grader.rubric import load_rubric
    from tests.adversarial.builders import commit

    project = commit(bake(tmp_path, project_name="Untouched"), "baked from the kit")
    report = grade(str(project), rubric=load_rubric(), timeout=120, cache_root=grade_cache)

    scores = {row["id"]: row["score"] for row in report["rows"]}
    assert report["total"]["percent"] <= 25, (report["total"], scores)
    offline = next(row for row in report["rows"] if row["id"] == "offline-replay")
    assert "no recording found" in offline["evidence"], offline
    for row_id in (
        "offline-replay",
        "loud-miss",
        "canonical-keys",
        "replay-doc",
        "model-metadata",
        "cassette-hygiene",
        "model-drift",  # a triage command, but no recorded input to re-run against the drifted stand-in
    ):
        assert scores[row_id] == 0, (row_id, scores)
