"""The composite action (.github/actions/grade/action.yml) run locally, step by step, the way a runner does.

Each `run:` step goes to `bash --noprofile --norc -eo pipefail` (GitHub's `shell: bash`) with its `env:`
expressions resolved from the inputs, `github.action_path`, `runner.temp` and earlier steps' outputs, and
with GITHUB_OUTPUT / GITHUB_STEP_SUMMARY pointing at temp files. The kit is already installed here, so the
tests pass `install: "false"` and this interpreter as `python`. The example workflow is checked for the
pieces docs/ci.md promises (summary, SARIF upload, threshold, full history).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from grader.report import render
from tests.test_formats import REPO, SAMPLE, SARIF_SCHEMA, TREE_KEY, make_leaky_submission

ACTION_DIR = REPO / ".github" / "actions" / "grade"
WORKFLOW = REPO / "docs" / "examples" / "grade-workflow.yml"
_EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


@dataclass
class ActionRun:
    steps: list[tuple[str, int, str]] = field(default_factory=list)  # (step name, exit code, stdout+stderr)
    step_outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""

    @property
    def exit_code(self) -> int:
        return self.steps[-1][1] if self.steps else 0

    @property
    def log(self) -> str:
        return "\n".join(f"--- {name} (exit {code})\n{text}" for name, code, text in self.steps)


def _read_outputs(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT's two forms: `key=value` lines and `key<<DELIM` ... `DELIM` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    index = 0
    while index < len(lines):
        line = lines[index]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, index + 1)
            out[key] = "\n".join(lines[index + 1 : end])
            index = end + 1
            continue
        key, _, value = line.partition("=")
        out[key] = value
        index += 1
    return out


def _resolve(text: str, context: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in context, f"the action uses ${{{{ {name} }}}}, which this harness does not know"
        return context[name]

    return _EXPRESSION.sub(value, str(text))


def run_action(inputs: dict[str, str], workspace: Path, tmp: Path) -> ActionRun:
    """Run the action's steps in order, stopping at the first failing one, as a runner does."""
    action = yaml.safe_load((ACTION_DIR / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    declared = action.get("inputs") or {}
    unknown = set(inputs) - set(declared)
    assert not unknown, f"inputs the action does not declare: {unknown}"
    context = {f"inputs.{k}": str(inputs.get(k, spec.get("default", ""))) for k, spec in declared.items()}
    runner_temp = tmp / "runner-temp"
    runner_temp.mkdir(exist_ok=True)
    context.update({"github.action_path": str(ACTION_DIR), "runner.temp": str(runner_temp)})
    summary = tmp / "step-summary.md"
    summary.touch()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    base_env.update(
        GITHUB_ACTIONS="true",
        GITHUB_WORKSPACE=str(workspace),
        GITHUB_ACTION_PATH=str(ACTION_DIR),
        GITHUB_STEP_SUMMARY=str(summary),
        RUNNER_TEMP=str(runner_temp),
    )
    result = ActionRun()
    for number, step in enumerate(action["runs"]["steps"]):
        assert "uses" not in step and "if" not in step, "every step is a plain run step, tested here"
        assert step["shell"] == "bash"
        script = tmp / f"step-{number}.sh"
        script.write_text(step["run"], encoding="utf-8")
        assert "${{" not in step["run"], "expressions go through env:, never into the script text"
        output_file = tmp / f"step-{number}.output"
        env = {**base_env, "GITHUB_OUTPUT": str(output_file)}
        env.update({k: _resolve(v, context) for k, v in (step.get("env") or {}).items()})
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        name = step.get("name", f"step {number}")
        result.steps.append((name, proc.returncode, proc.stdout + proc.stderr))
        outputs = _read_outputs(output_file)
        if step.get("id"):
            result.step_outputs[step["id"]] = outputs
            context.update({f"steps.{step['id']}.outputs.{k}": v for k, v in outputs.items()})
        if proc.returncode != 0:
            break
    for key, spec in (action.get("outputs") or {}).items():
        result.outputs[key] = _EXPRESSION.sub(lambda m: context.get(m.group(1), ""), spec["value"])
    result.summary = summary.read_text(encoding="utf-8")
    return result


def _inputs(target: Path | str, out: Path, **extra: str) -> dict[str, str]:
    return {
        "target": str(target),
        "output-dir": str(out),
        "install": "false",
        "python": sys.executable,
        **extra,
    }


def _validate_sarif(path: Path) -> dict[str, Any]:
    log = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))).validate(log)
    return log


@pytest.mark.index
def test_the_action_grades_the_sample_and_publishes_every_report(tmp_path: Path) -> None:
    out = tmp_path / "workspace" / "grade-report"
    out.parent.mkdir()
    run = run_action(_inputs(SAMPLE, out, **{"fail-under": "90"}), out.parent, tmp_path)

    assert run.exit_code == 0, run.log
    assert [code for _, code, _ in run.steps] == [0, 0, 0, 0]
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    # The job summary is the Markdown report, exactly.
    assert run.summary == render(report, "markdown")
    assert run.summary.startswith("## Grade report") and "| `offline-replay` |" in run.summary
    log = _validate_sarif(Path(run.outputs["sarif"]))
    assert log["runs"][0]["tool"]["driver"]["name"] == "cassette-grader"
    for name in ("report.md", "report.junit.xml", "report.html", "results.json"):
        assert (out / name).stat().st_size > 0
    assert float(run.outputs["percent"]) == report["total"]["percent"] >= 90
    assert float(run.outputs["points"]) == report["total"]["points"]
    assert run.outputs["exit-code"] == "0" and run.outputs["report-dir"] == str(out)


@pytest.mark.index
def test_below_the_threshold_the_reports_still_land_and_the_action_fails_with_3(tmp_path: Path) -> None:
    repo = make_leaky_submission(tmp_path)
    out = tmp_path / "grade-report"
    run = run_action(_inputs(repo, out, **{"fail-under": "95"}), tmp_path, tmp_path)

    assert run.exit_code == 3, run.log
    assert [code for _, code, _ in run.steps] == [0, 0, 0, 3]  # the summary and SARIF came first
    assert "::error title=grade::total" in run.steps[-1][2] and "below fail-under 95%" in run.steps[-1][2]
    assert run.outputs["exit-code"] == "3"
    # Markdown escapes brackets from submission text; rendered, it reads "[redacted]".
    assert "no-credentials" in run.summary and "\\[redacted\\]" in run.summary
    log = _validate_sarif(out / "report.sarif")
    assert any(
        r["level"] == "error" and r["ruleId"].startswith("secrets/") for r in log["runs"][0]["results"]
    )
    for path in out.iterdir():
        assert TREE_KEY not in path.read_text(encoding="utf-8"), path
    assert TREE_KEY not in run.summary


def test_bad_input_fails_the_grade_step_with_one_error_and_no_summary(tmp_path: Path) -> None:
    out = tmp_path / "grade-report"
    run = run_action(_inputs(tmp_path / "no-such-submission", out), tmp_path, tmp_path)

    assert run.exit_code == 2, run.log
    assert [name for name, _, _ in run.steps] == ["Install the grader", "Grade"]
    text = run.steps[-1][2]
    assert "grade: error:" in text and "::error title=grade::grading" in text
    assert "Traceback" not in text
    assert run.summary == ""


def test_a_target_cannot_inject_shell(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    out = tmp_path / "grade-report"
    run = run_action(_inputs(f"x; touch {marker}", out), tmp_path, tmp_path)
    assert run.exit_code == 2, run.log
    assert not marker.exists()


def test_the_example_workflow_uses_the_action_and_publishes_everything() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"push", "schedule"} <= set(triggers)
    (job,) = workflow["jobs"].values()
    assert job["permissions"]["security-events"] == "write"
    steps = job["steps"]
    uses = [step.get("uses", "") for step in steps]
    checkout = next(step for step in steps if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0  # the secret scan reads the whole history
    grade = next(step for step in steps if step.get("uses", "").endswith(".github/actions/grade@v1"))
    assert "fail-under" in grade["with"]
    upload = next(
        step for step in steps if step.get("uses", "").startswith("github/codeql-action/upload-sarif@")
    )
    assert "always()" in upload["if"] and "sarif" in upload["with"]["sarif_file"]
    assert uses.index(upload["uses"]) > uses.index(grade["uses"])
    assert any("upload-artifact" in u for u in uses)
