"""docs/design.md's "The order of the pipeline": the table matches the registrations, and the pipeline
runs checks (and starts their background probes) in the order the registrations declare."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

import grader.checks as checks
from grader.checks import CheckResult, register, registry
from grader.context import Context
from grader.grading import run_checks
from tests.helpers.context import folder_context

REPO = Path(__file__).resolve().parents[1]
_ROW = re.compile(r"^\| (first|normal|last) \| (.*?) \|", re.MULTILINE)


def _section() -> str:
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    start = text.index("## The order of the pipeline")
    return text[start : text.index("\n## ", start + 1)]


def _ids(text: str) -> set[str]:
    return set(re.findall(r"`([a-z][a-z0-9-]*)`", text))


def test_the_documented_phases_are_the_registered_ones():
    documented = {phase: _ids(cell) for phase, cell in _ROW.findall(_section())}
    declared = {phase: {c.id for c in registry().values() if c.phase == phase} for phase in checks.PHASES}
    assert documented["first"] == declared["first"] == {"replay"}
    assert documented["last"] == declared["last"] == {"secrets"}
    assert documented["normal"] == set()  # "every other check"


def test_the_documented_background_probes_are_the_registered_ones():
    sentence = _section().split("With `--jobs` above 1", 1)[1].split(" start before", 1)[0]
    documented = _ids(sentence.replace("`probes=`", ""))
    assert documented == {c.id for c in registry().values() if c.probes is not None}


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """An empty registry of five checks that record when they ran and when their probes started."""
    monkeypatch.setattr(checks, "_REGISTRY", {})
    monkeypatch.setattr(checks, "_loaded", True)
    events: list[str] = []
    lock = threading.Lock()

    def note(event: str) -> None:
        with lock:
            events.append(event)

    def make(check_id: str) -> None:
        def check(ctx: Context) -> CheckResult:
            """Records its turn."""
            note(check_id)
            probe = ctx.probe_result(f"{check_id} probe")
            return CheckResult({"probe": probe})

        phase = {"sweep": "last", "suite": "first"}.get(check_id, "normal")
        probes = None
        if check_id in ("sweep", "waiter"):

            def probes(ctx: Context, check_id: str = check_id) -> None:
                note(f"start {check_id} probe")
                ctx.start_probe(f"{check_id} probe", lambda: "ran")

        register(check_id, phase=phase, probes=probes)(check)  # type: ignore[arg-type]

    for check_id in ("sweep", "waiter", "alpha", "suite", "beta"):
        make(check_id)
    return events


# The rubric's order: the phases, not this order, decide when each check runs.
_RUBRIC = ["sweep", "waiter", "alpha", "suite", "beta", "alpha"]


def test_with_one_job_the_phases_decide_the_order_and_no_probe_starts_early(recorded, tmp_path: Path):
    results = run_checks(folder_context(tmp_path), _RUBRIC, {}, lambda *a: None, jobs=1)

    assert recorded == ["suite", "waiter", "alpha", "beta", "sweep"]
    assert list(results) == ["suite", "waiter", "alpha", "beta", "sweep"]
    assert results["waiter"].facts["probe"] is None  # never started: the check runs it itself


def test_with_two_jobs_probes_start_first_and_their_normal_check_runs_last(recorded, tmp_path: Path):
    results = run_checks(folder_context(tmp_path), _RUBRIC, {}, lambda *a: None, jobs=2)

    started = [e for e in recorded if e.startswith("start ")]
    ran = [e for e in recorded if not e.startswith("start ")]
    assert set(started) == {"start sweep probe", "start waiter probe"}
    assert recorded.index("suite") > max(recorded.index(e) for e in started)
    assert ran[0] == "suite" and ran[-1] == "sweep"
    assert ran[1:3] in (["alpha", "beta"], ["beta", "alpha"]) and ran[3] == "waiter"
    assert results["waiter"].facts["probe"] == results["sweep"].facts["probe"] == "ran"
