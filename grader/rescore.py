"""`grade rescore RUN_DIR --rubric NEW.yaml`: score stored runs again under a new rubric, running no code.

RUN_DIR is a batch output folder (``batch.json``) or one stored run (``run.json``). The new rubric is
validated against the facts the stored runs hold (not against today's checks), so a row that needs a fact or
a check the runs did not record is refused with ``NEW.yaml:LINE: ...`` (exit 2) before anything is written.

Nothing is lost: the reports, the rubric copy and run.json being replaced (and a batch's summaries) are moved
to ``history/<UTC timestamp>/`` inside their folder first; ``--dry-run`` writes nothing at all. What moved is
returned as ``Change``s, and the CLI prints them, e.g. ``alice  offline-replay 3 -> 2``. A run whose report
would come out the same (the rubric it was scored with, the same rows) is left alone, history included.

Only scoring runs again. Facts a check computed from a threshold at grading time (hygiene's
``conversation_blobs``) keep the old threshold; the changed thresholds are reported so the reader knows.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.batch import BATCH_FILE, BATCH_SCHEMA, NOT_ASSESSABLE, Entry, Outcome, write_summary
from grader.checks import Check
from grader.errors import BadInput
from grader.rubric import load_rubric, score, totals
from grader.runstore import MANIFEST, StoredRun, load_run, write_json, write_reports

if TYPE_CHECKING:
    from grader.checks import CheckResult
    from grader.rubric import Rubric

__all__ = ["Change", "RescoreResult", "Rescored", "rescore"]

_HISTORY = "history"


@dataclass(frozen=True)
class Change:
    """One thing that moved for one candidate.

    ``what`` is "score" (old/new: a score, "manual", "n/a", or "-" for a row one rubric lacks), "weight"
    (old/new: the weights; ``score`` the unchanged score) or "total" (old/new: ``points/max (percent%)``).
    """

    candidate: str
    row: str
    old: str
    new: str
    what: str = "score"
    score: str = ""

    def line(self) -> str:
        """``offline-replay 3 -> 2``, ``loud-miss weight 3 -> 1 (score 3)``, ``total 54/54 (100%) -> ...``."""
        if self.what == "weight":
            return f"{self.row} weight {self.old} -> {self.new} (score {self.score})"
        return f"{self.row} {self.old} -> {self.new}"


@dataclass
class Rescored:
    """One candidate after re-scoring."""

    candidate: str
    folder: Path
    old_total: dict[str, Any] | None
    new_total: dict[str, Any] | None
    changes: list[Change] = field(default_factory=list)
    reason: str = ""  # why there is nothing to re-score (the candidate was not assessable)


@dataclass
class RescoreResult:
    rubric: Rubric
    candidates: list[Rescored]
    thresholds_changed: dict[str, tuple[Any, Any]]
    history: list[Path]  # the history/<stamp>/ folders written; empty when nothing was (or --dry-run)
    rewritten: int = 0  # runs whose report differs under the new rubric (written unless --dry-run)


def rescore(run_dir: Path, rubric_path: Path, *, dry_run: bool = False) -> RescoreResult:
    """Re-score every stored run under ``run_dir`` with ``rubric_path`` (BadInput if unusable)."""
    run_dir = Path(run_dir)
    batch = _read_batch(run_dir)
    runs = _load_runs(run_dir, batch)
    rubric = _load_rubric(rubric_path, [run for _, run in runs], run_dir)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    candidates: list[Rescored] = []
    updated: list[tuple[StoredRun, dict[str, Any]]] = []
    thresholds_changed: dict[str, tuple[Any, Any]] = {}
    for name, run in runs:
        if run.report is None:
            candidates.append(Rescored(name, run.path, None, None, reason=run.reason))
            continue
        new_report = _rescored_report(run, rubric)
        old_total, new_total = run.report.get("total"), new_report["total"]
        changes = _changes(name, run.report.get("rows") or [], new_report["rows"])
        if old_total != new_total:
            changes.append(Change(name, "total", _total(old_total), _total(new_total), what="total"))
        candidates.append(Rescored(name, run.path, old_total, new_total, changes))
        if _without_notes(new_report) != _without_notes(run.report):
            updated.append((run, new_report))  # else the same rubric scored the same: nothing to write
        old_thresholds = (run.manifest.get("rubric") or {}).get("thresholds") or {}
        for key in sorted(set(old_thresholds) | set(rubric.thresholds)):
            old, new = old_thresholds.get(key), rubric.thresholds.get(key)
            if old != new:
                thresholds_changed[key] = (old, new)
    history: list[Path] = []
    if not dry_run:
        for run, report in updated:
            history.append(_rewrite_run(run, report, rubric, stamp))
        batch_moved = batch is not None and (batch.get("rubric") or {}).get("sha256") != rubric.sha256
        if batch is not None and (updated or batch_moved):
            history.append(_rewrite_batch(run_dir, batch, runs, rubric, stamp))
    return RescoreResult(rubric, candidates, thresholds_changed, history, len(updated))


def _without_notes(report: dict[str, Any]) -> dict[str, Any]:
    """The report but its notes, which gain a dated "re-scored ..." line on every re-score."""
    return {key: value for key, value in report.items() if key != "notes"}


# ------------------------------------------------------------------------------------------- reading


def _read_batch(run_dir: Path) -> dict[str, Any] | None:

    path = run_dir / BATCH_FILE
    if not path.is_file():
        if not (run_dir / MANIFEST).is_file():
            raise BadInput(
                f"{run_dir}: neither a batch folder ({BATCH_FILE}) nor a stored run ({MANIFEST}); "
                "pass a folder written by `grade batch` or `grade --store`"
            )
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: cannot read the batch manifest: {exc}") from None
    if (
        not isinstance(data, dict)
        or data.get("schema") != BATCH_SCHEMA
        or not isinstance(data.get("candidates"), list)
    ):
        raise BadInput(f"{path}: not a {BATCH_SCHEMA} manifest")
    return data


def _load_runs(run_dir: Path, batch: dict[str, Any] | None) -> list[tuple[str, StoredRun]]:
    if batch is None:
        return [(run_dir.resolve().name, load_run(run_dir))]
    runs: list[tuple[str, StoredRun]] = []
    for item in batch["candidates"]:
        folder = str(item.get("folder", "")) if isinstance(item, dict) else ""
        # The folder name comes from a file anyone can edit: it must be one plain name inside run_dir.
        if not folder or Path(folder).name != folder or folder in {".", ".."}:
            raise BadInput(f"{run_dir / 'batch.json'}: bad candidate folder {folder!r}")
        path = run_dir / folder
        if path.is_symlink():
            raise BadInput(f"{path}: is a link; a batch folder's candidates must be real folders")
        runs.append((str(item.get("candidate", folder)), load_run(path)))
    return runs


def _load_rubric(path: Path, runs: list[StoredRun], run_dir: Path) -> Rubric:
    """The new rubric, checked twice so the two problems read apart: first on its own (a typo is "your
    rubric is invalid", as `grade` would say), then against what the stored runs hold."""

    load_rubric(path)  # BadInput as-is: the rubric is wrong whatever it is used on
    try:
        return load_rubric(path, checks=_stored_checks(runs))
    except BadInput as exc:
        hint = (
            f"the new rubric is valid, but it needs checks or facts the runs stored in {run_dir} lack; "
            "re-grade to use them"
        )

        def stored(problem: str) -> str:
            # Checked against what was stored, a check the grader knows reads as "not stored", not "unknown".
            return _UNKNOWN_CHECK.sub(r"check \1 is not in the stored runs (they ran: \2)", problem)

        raise BadInput(
            f"{stored(str(exc))} ({hint})", problems=tuple(f"{stored(p)} ({hint})" for p in exc.problems)
        ) from None


_UNKNOWN_CHECK = re.compile(r"unknown check ('[^']*'); known checks: (.*)$")


def _stored_checks(runs: list[StoredRun]) -> dict[str, Check]:
    """Check id -> a Check whose facts are those every stored run that ran the check documented."""

    facts: dict[str, set[str]] = {}
    for run in runs:
        if run.report is None:
            continue
        declared = run.declared_facts
        for check_id, result in run.results.items():
            names = set(declared.get(check_id) or result.facts)
            facts[check_id] = facts[check_id] & names if check_id in facts else names
    return {
        check_id: Check(check_id, _never_run, "stored facts", {name: "" for name in sorted(names)})
        for check_id, names in facts.items()
    }


def _never_run(ctx: Any) -> CheckResult:
    raise RuntimeError("re-scoring never runs a check")


# ------------------------------------------------------------------------------------------- scoring


def _rescored_report(run: StoredRun, rubric: Rubric) -> dict[str, Any]:

    assert run.report is not None
    rows = score(rubric, run.results)
    old = run.report.get("rubric") or {}
    report = dict(run.report)
    report["rubric"] = rubric.reference()
    report["rows"] = [row.as_dict() for row in rows]
    report["total"] = totals(rows)
    note = (
        f"re-scored {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')} with rubric "
        f"{rubric.name!r} ({rubric.sha256[:12]}) from the facts stored when it was graded with "
        f"{old.get('name', '?')!r} ({str(old.get('sha256', ''))[:12]}); no submission code ran"
    )
    report["notes"] = [*(run.report.get("notes") or []), note]
    return report


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if row.get("status") == "scored" and row.get("score") is not None:
        return str(row["score"])
    return "manual" if row.get("status") == "manual" else "n/a"


def _changes(name: str, old_rows: list[dict[str, Any]], new_rows: list[dict[str, Any]]) -> list[Change]:
    old = {r.get("id"): r for r in old_rows}
    new = {r.get("id"): r for r in new_rows}
    changes: list[Change] = []
    for row_id in [*new, *(r for r in old if r not in new)]:
        before, after = _cell(old.get(row_id)), _cell(new.get(row_id))
        weight_moved = (
            row_id in old and row_id in new and old[row_id].get("weight") != new[row_id].get("weight")
        )
        if before != after:
            changes.append(Change(name, str(row_id), before, after))
        elif weight_moved:
            w_old, w_new = old[row_id].get("weight"), new[row_id].get("weight")
            changes.append(Change(name, str(row_id), str(w_old), str(w_new), what="weight", score=after))
    return changes


def _total(total: dict[str, Any] | None) -> str:
    if not total:
        return "-"
    return f"{total.get('points')}/{total.get('max')} ({total.get('percent')}%)"


# ------------------------------------------------------------------------------------------- writing


def _history_dir(folder: Path, stamp: str) -> Path:
    target = folder / _HISTORY / stamp
    n = 1
    while target.exists():
        n += 1
        target = folder / _HISTORY / f"{stamp}-{n}"
    target.mkdir(parents=True)
    return target


def _rewrite_run(run: StoredRun, report: dict[str, Any], rubric: Rubric, stamp: str) -> Path:
    manifest = dict(run.manifest)
    files = dict(manifest.get("files") or {})
    reports = dict(files.get("reports") or {"json": "report.json"})
    keep = _history_dir(run.path, stamp)
    # Copy first, then replace each file atomically: an interrupted re-score leaves old + history intact.
    for name in [*reports.values(), files.get("rubric", ""), MANIFEST]:
        source = run.path / str(name)
        if name and Path(str(name)).name == name and source.is_file() and not source.is_symlink():
            shutil.copy2(source, keep / str(name))
    files["reports"] = write_reports(run.path, report, list(reports))
    files["report"] = files["reports"]["json"]
    try:
        (run.path / "rubric.yaml").write_bytes(rubric.source)  # the bytes its sha256 names
        files["rubric"] = "rubric.yaml"
    except OSError:
        files.pop("rubric", None)
    manifest["files"] = files
    manifest["rubric"] = {**rubric.reference(), "thresholds": dict(rubric.thresholds)}
    graded_with = (run.manifest.get("rubric") or {}).get("thresholds")
    manifest["graded_thresholds"] = manifest.get("graded_thresholds", graded_with)
    history = list(manifest.get("rescored") or [])
    history.append({"at": stamp, "rubric": rubric.reference(), "previous": f"{_HISTORY}/{keep.name}"})
    manifest["rescored"] = history
    write_json(run.path / MANIFEST, manifest)
    return keep


def _rewrite_batch(
    run_dir: Path, batch: dict[str, Any], runs: list[tuple[str, StoredRun]], rubric: Rubric, stamp: str
) -> Path:

    keep = _history_dir(run_dir, stamp)
    for name in ("summary.csv", "summary.md", BATCH_FILE):
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, keep / name)
    outcomes = []
    for item, (name, _) in zip(batch["candidates"], runs, strict=True):
        folder = str(item["folder"])
        run = load_run(run_dir / folder)  # re-read: the reports were just rewritten
        entry = Entry(name, str(item.get("target", run.target)), int(item.get("line", 0)), folder)
        if run.report is None:
            outcomes.append(Outcome(entry, NOT_ASSESSABLE, reason=run.reason))
        else:
            outcomes.append(Outcome(entry, "graded", report=run.report))
    write_summary(run_dir, outcomes, rubric)
    updated = {**batch, "rubric": rubric.reference()}
    updated["rescored"] = [
        *(batch.get("rescored") or []),
        {"at": stamp, "previous": f"{_HISTORY}/{keep.name}"},
    ]
    write_json(run_dir / BATCH_FILE, updated)
    return keep
