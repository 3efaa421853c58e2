"""Build each corpus case, grade it with the installed grader and a rubric, compare rows to their bands."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.errors import BadInput
from grader.grading import grade
from grader.selftest.corpus import INDEPENDENT, Case
from grader.selftest.mutations import git, mutations

if TYPE_CHECKING:
    from grader.rubric import Rubric

__all__ = ["CaseResult", "RowVerdict", "build_case", "run_case", "run_selftest", "sample_solution_path"]

_COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "venv", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".cassette-used.jsonl",
    "*.misses.jsonl", "*.egg-info",
)  # fmt: skip
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_EVIDENCE_SHOWN = 200


@dataclass
class RowVerdict:
    row: str
    score: int | None
    band: tuple[int, int] | None  # None: not banded (a row the case's reviewers never saw): reported only
    evidence: str
    problems: list[str] = field(default_factory=list)  # empty: in band, evidence as expected
    manual: bool = False  # the band is "left to a reviewer" (status manual), not a score
    known_gap: str = ""  # out of band for a reason the corpus names (Case.known_gaps): reported, not failed

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self, case_id: str) -> str:
        """One output line: ``case row: ok ...`` or ``case row: OUT OF BAND: ... — evidence``."""
        evidence = " ".join(self.evidence.split())
        if len(evidence) > _EVIDENCE_SHOWN:
            evidence = evidence[: _EVIDENCE_SHOWN - 1] + "…"
        if self.ok and self.known_gap:
            got = "manual" if self.score is None else self.score
            return f"{case_id} {self.row}: known gap ({got}; its reviewers' band differs): {self.known_gap}"
        if self.ok and self.manual:
            return f"{case_id} {self.row}: ok (manual, as its reviewers expect)"
        if self.ok and self.band is None:
            return f"{case_id} {self.row}: not banded ({self.score}; the case's bands predate this row)"
        if self.ok and self.band is not None:
            return f"{case_id} {self.row}: ok ({self.score} in [{self.band[0]}, {self.band[1]}])"
        return f"{case_id} {self.row}: {'; '.join(self.problems)} — {evidence}"


@dataclass
class CaseResult:
    case: Case
    planted: dict[str, str] = field(default_factory=dict)
    verdicts: list[RowVerdict] = field(default_factory=list)
    report: dict[str, Any] | None = None
    error: str | None = None  # the case could not be built or graded

    @property
    def ok(self) -> bool:
        return self.error is None and all(v.ok for v in self.verdicts)

    def lines(self) -> list[str]:
        if self.error is not None:
            return [f"{self.case.id}: FAILED: {self.error}"]
        return [v.line(self.case.id) for v in self.verdicts]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.case.id,
            "ok": self.ok,
            "error": self.error,
            "planted": dict(self.planted),
            "rows": [
                {
                    "id": v.row,
                    "score": v.score,
                    "band": "manual" if v.manual else list(v.band) if v.band is not None else None,
                    "ok": v.ok,
                    "known_gap": v.known_gap,
                    "problems": list(v.problems),
                    "evidence": v.evidence,
                    "details": _row(self.report, v.row).get("details", []),
                }
                for v in self.verdicts
            ],
        }


def sample_solution_path() -> Path:
    """The kit's sample_solution (wheel: grader/_sample_solution; source checkout: ./sample_solution)."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_sample_solution", here.parent / "sample_solution"):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    raise BadInput("the calibration corpus needs sample_solution, which this installation does not ship")


def build_case(case: Case, dest: Path) -> tuple[str, dict[str, str]]:
    """Make the case's submission under ``dest``; returns (target for `grade`, what the steps planted)."""
    repo = dest / case.id
    if case.base == "bundle":
        # Graded exactly as its author committed it, history included.
        git(dest, "clone", "-q", str(INDEPENDENT / case.bundle), str(repo))
        return str(repo), {}
    sample = sample_solution_path()
    if case.base == "sample-shipped":
        return str(sample), {}
    shutil.copytree(sample, repo, symlinks=True, ignore=_COPY_IGNORE)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "take-home submission")
    planted: dict[str, str] = {}
    registry = mutations()
    for step in case.steps:
        params = {k: v for k, v in step.items() if k != "op"}
        registry[step["op"]](repo, planted, **params)
    if git(repo, "status", "--porcelain").strip():
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "final touches")
    return str(repo), planted


def _row(report: dict[str, Any] | None, row_id: str) -> dict[str, Any]:
    for row in (report or {}).get("rows", []):
        if row.get("id") == row_id:
            return dict(row)
    return {}


def _expand(pattern: str, planted: dict[str, str]) -> str | None:
    missing = [name for name in _PLACEHOLDER.findall(pattern) if name not in planted]
    if missing:
        return None
    return _PLACEHOLDER.sub(lambda m: planted[m.group(1)], pattern)


def _judge(case: Case, report: dict[str, Any], planted: dict[str, str]) -> list[RowVerdict]:
    """One verdict per rubric row, plus a failing verdict for each row the case names but the rubric lacks."""
    verdicts: list[RowVerdict] = []
    rows = {row["id"]: row for row in report.get("rows", [])}
    for row_id, row in rows.items():
        band = case.band(row_id)
        score = row.get("score")
        verdict = RowVerdict(row_id, score, band, str(row.get("evidence", "")), manual=row_id in case.manual)
        if verdict.manual:
            if row.get("status") != "manual":
                got = score if score is not None else row.get("status")
                verdict.problems.append(f"OUT OF BAND: expected manual (left to a reviewer), got {got}")
        elif band is None:
            pass  # reported with its score, judged by nobody: its reviewers never saw this row
        elif score is None:
            verdict.problems.append(f"OUT OF BAND: expected [{band[0]}, {band[1]}], got {row.get('status')}")
        elif not band[0] <= score <= band[1]:
            verdict.problems.append(f"OUT OF BAND: expected [{band[0]}, {band[1]}], got {score}")
        gap = case.known_gaps.get(row_id)
        if gap and verdict.problems:
            verdict.problems, verdict.known_gap = [], gap
        elif gap:
            verdict.problems.append("KNOWN GAP CLOSED: the row is in band now; remove it from known_gaps")
        text = "\n".join([verdict.evidence, *map(str, row.get("details", []))])
        for pattern in case.evidence.get(row_id, []):
            expected = _expand(pattern, planted)
            if expected is None:
                verdict.problems.append(f"EVIDENCE PATTERN {pattern!r} names something no step planted")
            elif expected not in text:
                verdict.problems.append(f"EVIDENCE MISSING: expected {expected!r} in the evidence or details")
        verdicts.append(verdict)
    for row_id in sorted((set(case.expect) | case.manual | set(case.evidence)) - set(rows)):
        missing = RowVerdict(row_id, None, case.band(row_id), "")
        missing.problems.append("ROW MISSING: the rubric has no row with this id")
        verdicts.append(missing)
    return verdicts


def run_case(
    case: Case, rubric: Rubric, *, timeout: float = 120.0, cache_root: Path | None = None
) -> CaseResult:
    """Build, grade and judge one case; a failure to build or grade is the case's error, never a raise."""

    result = CaseResult(case)
    with tempfile.TemporaryDirectory(prefix=f"selftest-{case.id}-") as tmp:
        try:
            target, result.planted = build_case(case, Path(tmp))
            result.report = grade(target, rubric=rubric, timeout=timeout, cache_root=cache_root)
        except Exception as exc:  # one broken case must not hide the others' verdicts
            result.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            return result
    result.verdicts = _judge(case, result.report, result.planted)
    return result


def run_selftest(
    cases: Sequence[Case],
    rubric: Rubric,
    *,
    timeout: float = 120.0,
    cache_root: Path | None = None,
    jobs: int = 1,
    on_result: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Run every case (``jobs`` at once); ``on_result`` sees each result as it finishes. Corpus order kept."""

    def one(case: Case) -> CaseResult:
        outcome = run_case(case, rubric, timeout=timeout, cache_root=cache_root)
        if on_result is not None:
            on_result(outcome)
        return outcome

    if jobs <= 1:
        return [one(case) for case in cases]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, cases))
