"""The grading pipeline: acquire -> manifest -> install -> checks -> score, as one grade-report/1 dict.

Failures of the grader's own environment are not the submission's: a full disk (ENOSPC) during a check or a
run makes the rows it affects not-assessable with ``no space left on device: <where>``; when nothing can be
graded at all (no room for the workspace) ``grade`` raises NotAssessable, and ``unassessed_report`` gives the
report to write anyway (every row not-assessable with the reason).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader import __version__
from grader._json import jsonable
from grader.acquire import acquire, no_space, no_space_reason, redact
from grader.checks import PHASES, CheckResult, registry
from grader.context import Context, for_want_of_room
from grader.deeptree import MAX_DEPTH, remove_workspace
from grader.details import submission_relative
from grader.errors import BadInput, NotAssessable, describe
from grader.install import Env, InstallFailed, default_cache_root, ensure_env
from grader.kept import make_inert
from grader.manifest import not_a_submission, read_manifest
from grader.requirements import Dependencies, read_dependencies
from grader.rubric import score, totals
from grader.runstore import store_run
from grader.sandbox import host_shortfall, isolation

if TYPE_CHECKING:
    from grader.acquire import Workspace
    from grader.checks import Check
    from grader.rubric import Rubric

__all__ = ["Progress", "grade", "run_checks", "unassessed_report"]

# The default overall budget of a grade, in per-command timeouts (docs/reviewer.md: --budget).
BUDGET_TIMEOUTS = 4

# step, seconds the step took, one-line message
Progress = Callable[[str, float, str], None]

SCHEMA = "grade-report/1"


def _no_progress(step: str, seconds: float, message: str) -> None:
    return None


def _one_line_progress(progress: Progress, limit: int = 240) -> Progress:
    # Reasons (an install log tail) can span lines; a progress line must stay one line.
    def report(step: str, seconds: float, message: str) -> None:
        text = " ".join(str(message).split())
        progress(step, seconds, text if len(text) <= limit else text[: limit - 1] + "…")

    return report


def grade(
    target: str,
    *,
    rubric: Rubric,
    timeout: float = 300.0,
    keep_workspace: bool = False,
    cache_root: Path | None = None,
    progress: Progress | None = None,
    jobs: int = 1,
    store: Path | None = None,
    store_formats: tuple[str, ...] = ("json", "markdown"),
    budget: float | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """Grade one submission; raises BadInput only for an unusable target (before any code runs).

    ``notes``: said first in the report's notes (e.g. `grade batch`: why this candidate was graded again).

    ``budget``: seconds the whole grade may take (default ``BUDGET_TIMEOUTS`` × ``timeout``). No command
    starts once it is spent and none runs past it; the rows that left unassessed are not-assessable, and
    the report's notes say which and why.

    Raises NotAssessable when nothing can be graded because the grader's own environment failed (no space
    for the workspace, the run or the stored run); a failure that costs only some rows marks those rows.
    ``store``: a new folder to keep the run in (grader/runstore.py: report, check results, raw logs,
    rubric copy), so it can be re-scored later without running the submission again.
    """

    started = time.monotonic()
    budget = BUDGET_TIMEOUTS * timeout if budget is None else budget
    shortfall = host_shortfall()
    if shortfall is not None:
        # A host limit too low for any suite: nothing is scored, rather than the candidate scored down.
        raise NotAssessable(shortfall)
    report_progress = _one_line_progress(progress or _no_progress)
    cache_root = Path(cache_root).resolve() if cache_root else default_cache_root()
    try:
        root = Path(tempfile.mkdtemp())
    except OSError as exc:
        if no_space(exc):
            raise NotAssessable(no_space_reason("workspace folder", tempfile.gettempdir())) from None
        raise
    # Traversable (not listable) so the sandbox can hand the checkout to an unprivileged user.
    root.chmod(0o711)
    try:
        return _pipeline(
            target,
            root,
            rubric=rubric,
            timeout=timeout,
            keep_workspace=keep_workspace,
            cache_root=cache_root,
            progress=report_progress,
            jobs=jobs,
            store=store,
            store_formats=store_formats,
            budget=budget,
            started=started,
            notes=list(notes),
        )
    except OSError as exc:
        if not no_space(exc):
            raise
        if store is not None and _names(exc, store):
            raise NotAssessable(no_space_reason("store folder", store)) from None
        raise NotAssessable(no_space_reason("workspace", root)) from None
    finally:
        if keep_workspace:
            # Again on every way out (an error after the runs): idempotent, nothing left to rename.
            make_inert(root, root / "pristine")
            report_progress("workspace", 0.0, f"kept at {root}; {_KEPT_GIT}")
        else:
            remove_workspace(root)  # not shutil.rmtree: a run can leave folders too deep for it


_KEPT_GIT = (
    "every .git the suite could write was renamed to .git.inert (and HEAD of a bare one to HEAD.inert); "
    "repo/.git is the submitted one: git there runs nothing of the submission's"
)


def _make_kept_inert(root: Path, workspace: Workspace) -> str:
    """Make the kept workspace safe to enter with git (grader/kept.py); the note saying what was done."""
    renamed = make_inert(root, workspace.pristine)
    shown = ", ".join(renamed[:5]) + (f", … ({len(renamed)} in all)" if len(renamed) > 5 else "")
    return f"kept workspace: {_KEPT_GIT}" + (f" (renamed: {shown})" if renamed else "")


def _names(exc: OSError, folder: Path) -> bool:
    """Whether ``exc`` is about a file inside ``folder``."""
    name = exc.filename if isinstance(exc.filename, str) else ""
    return bool(name) and Path(name).resolve().is_relative_to(Path(folder).resolve())


def _pipeline(
    target: str,
    root: Path,
    *,
    rubric: Rubric,
    timeout: float,
    keep_workspace: bool,
    cache_root: Path,
    progress: Progress,
    jobs: int,
    store: Path | None,
    store_formats: tuple[str, ...],
    budget: float,
    started: float,
    notes: list[str],
) -> dict[str, Any]:

    timings: dict[str, float] = {}
    start = time.monotonic()
    workspace = acquire(target, root)
    timings["acquire"] = _since(start)
    manifest = read_manifest(workspace.repo)
    refused = not_a_submission(workspace.repo, manifest)
    if refused:  # bad input: one line, before anything else is printed
        raise BadInput(f"{workspace.source}: {refused}")
    commit = workspace.commit[:12] if workspace.commit else "no git history"
    progress("acquire", timings["acquire"], f"{workspace.source} @ {commit}")
    if workspace.uncommitted:
        notes.append(_uncommitted_note(workspace.commit or "", workspace.uncommitted))
    if workspace.pruned:
        first = workspace.pruned[0]
        notes.append(
            f"{len(workspace.pruned)} folder(s) nested deeper than {MAX_DEPTH} levels were removed before "
            f"grading (first: {first[:120]}{'…' if len(first) > 120 else ''}); nothing in them was graded"
        )
    notes.extend(manifest.notes)

    start = time.monotonic()
    left = started + budget - time.monotonic()
    if left < 1.0:
        spent = f"not run: the grade's budget of {budget:g} s was spent before the install"
        env: Env | None = None
        install_error: str | None = spent
        install_failed = False
        dependencies: Dependencies | None = read_dependencies(workspace.repo)
    else:
        env, install_error, install_failed, dependencies = _install(
            workspace.repo, cache_root=cache_root, timeout=min(timeout, left)
        )
    timings["install"] = _since(start)
    if env is not None:
        how = "cached" if env.cached else f"installed with {env.tool}"
        progress("install", timings["install"], f"{how}: {env.venv}")
        notes.extend(env.notes)
    else:
        whose = "the submission's" if install_failed else "not assessable"
        notes.append(f"install failed ({whose}): {' '.join(str(install_error).split())}")
        progress("install", timings["install"], f"failed: {install_error}")

    ctx = Context(
        workspace,
        manifest,
        env=env,
        install_error=install_error,
        install_failed=install_failed,
        dependencies=dependencies,
        thresholds=rubric.thresholds,
        timeout=timeout,
        budget=budget,
        started=started,
    )
    check_ids = [row.check for row in rubric.rows]
    results = run_checks(ctx, check_ids, timings, progress, jobs=jobs)
    notes.extend(_run_notes(ctx, rubric, results))
    iso = asdict(isolation())
    if ctx.sandbox_users:
        # "unprivileged" only when every run of submission code dropped privileges (docs/security.md).
        iso["user"] = "unprivileged" if ctx.sandbox_users == {"unprivileged"} else "grader"
    notes.extend(_isolation_notes(iso))
    graded = _Graded(workspace.source, workspace.commit, workspace.root)
    report = _report(graded, rubric, results, timings, notes, iso)
    environment = _environment(env)
    if environment:
        report["environment"] = environment
    if keep_workspace:
        report["notes"].extend([f"workspace kept at {root}", _make_kept_inert(root, workspace)])
    if store is not None:
        # Before the workspace goes: the raw logs (audit, results, JUnit) are part of the stored evidence.
        logs = root / "logs"
        try:
            store_run(store, report=report, results=results, rubric=rubric, logs=logs, formats=store_formats)
        except OSError as exc:
            # A write's ENOSPC names no file: it is the store's disk, never the workspace's (red team 13).
            if no_space(exc):
                raise NotAssessable(no_space_reason("store folder", store)) from None
            raise
    return report


def _run_notes(ctx: Context, rubric: Rubric, results: dict[str, CheckResult]) -> list[str]:
    """What the report must say about runs: each that reached its timeout, and each run the grader skipped
    or stopped (a probe of a suite that timed out, the budget spent) with the rows that left unassessed."""
    notes = [f"timed out after {seconds:g} s: {label}" for label, seconds in ctx.timeouts]
    notes.extend(ctx.disk_fills)  # a run of this submission's filled the shared workspace disk
    for reason in ctx.skipped:
        unassessed = {c for c, result in results.items() if reason in (result.not_assessable or "")}
        rows = [row.id for row in rubric.rows if row.check in unassessed]
        where = f"rows left unassessed: {', '.join(rows)}" if rows else "the rows were scored without it"
        notes.append(f"{reason}; {where}")
    return notes


def _isolation_notes(iso: dict[str, Any]) -> list[str]:
    """What a reviewer must know about the sandbox this grade ran in, when it is less than documented."""
    notes = []
    if iso.get("filesystem") == "host":
        notes.append(
            "sandbox without a mount namespace (bwrap could not run here): submission code saw the host's "
            "files (docs/security.md)"
        )
    if iso.get("memory") == "shared":
        notes.append(
            "sandbox without a memory ceiling per command (not root, or no cgroup the grader could use): "
            "only each process's address space was capped (docs/security.md)"
        )
    if iso.get("cpu") == "shared":
        notes.append(
            "sandbox without CPU groups (not root, or no cgroup the grader could use): a command's processes "
            "shared the CPU one by one, so a neighbour in a batch could slow this one down (docs/security.md)"
        )
    lowered = (iso.get("limits") or {}).get("lowered_by_host") or []
    if lowered:
        values = ", ".join(f"{name} {iso['limits'][name]}" for name in lowered)
        notes.append(f"sandbox limits lowered to this host's hard limits: {values}")
    return notes


def _since(start: float) -> float:
    return round(time.monotonic() - start, 3)


def _install(
    repo: Path, *, cache_root: Path, timeout: float
) -> tuple[Env | None, str | None, bool, Dependencies | None]:
    """(env, why there is none, whether that is the submission's own failure, the vetted dependencies)."""

    try:
        env = ensure_env(repo, cache_root=cache_root, timeout=timeout)
        return env, None, False, env.dependencies
    except InstallFailed as exc:
        return None, exc.reason, True, exc.dependencies
    except NotAssessable as exc:
        return None, exc.reason, False, read_dependencies(repo)


def _environment(env: Env | None) -> dict[str, Any]:
    """The report's ``environment``: the installer and the grader's pinned tools as installed."""
    if env is None:
        return {}
    return {"installer": env.tool, "cached": env.cached, "tools": dict(env.tools)}


def _ordered(check_ids: list[str], checks: Mapping[str, Check]) -> list[str]:
    """Each check once: the "first" ones, the "normal" ones, the "last" ones, each in the rubric's order.

    A check that is not installed counts as "normal" (it reports not-assessable where the rubric put it).
    """
    unique = list(dict.fromkeys(check_ids))
    return sorted(unique, key=lambda c: PHASES.index(_phase(c, checks)))


def _phase(check_id: str, checks: Mapping[str, Check]) -> str:
    check = checks.get(check_id)
    return "normal" if check is None else check.phase


def run_checks(
    ctx: Context,
    check_ids: list[str],
    timings: dict[str, float],
    progress: Progress,
    *,
    jobs: int = 1,
) -> dict[str, CheckResult]:
    """Run each referenced check once; a crash or NotAssessable inside a check marks only its rows."""

    checks = registry()
    ordered = _ordered(check_ids, checks)
    results: dict[str, CheckResult] = {}

    def one(check_id: str) -> None:
        start = time.monotonic()
        results[check_id] = _run_one(checks.get(check_id), check_id, ctx)
        timings[check_id] = _since(start)
        outcome = results[check_id]
        message = outcome.facts.get("summary") or outcome.manual or outcome.not_assessable or ""
        if outcome.not_assessable is not None:
            message = f"not assessable: {outcome.not_assessable}"
        progress(check_id, timings[check_id], str(message))

    head = [c for c in ordered if _phase(c, checks) == "first"]
    tail = [c for c in ordered if _phase(c, checks) == "last"]
    middle = [c for c in ordered if c not in head and c not in tail]
    pristine = ctx.keep_pristine()
    if jobs > 1:  # --jobs 1: every run of submission code one after another, as the checks run
        ctx.jobs = jobs
        if pristine:  # a background probe copies the checkout while the replay suite runs in it
            _start_background(ctx, [checks[c] for c in ordered if c in checks])
        # A check whose probes run in the background mostly waits for them: taken last, it leaves the
        # workers to the checks that still have work to do meanwhile (results keep the rubric's order).
        middle.sort(key=lambda c: _has_probes(c, checks))
    try:
        for check_id in head:
            one(check_id)
        if jobs > 1 and len(middle) > 1:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(one, middle))
        else:
            for check_id in middle:
                one(check_id)
        for check_id in tail:
            one(check_id)
    finally:
        ctx.wait_probes()  # nothing may still run in the workspace when it is reported or removed
    # A check the full workspace disk left unassessed runs once more, alone, when the room is back: a run
    # that flooded the disk (this submission's, whose flood its reclaim removed, or a neighbour's in a batch)
    # must not take rows out of the total, a committed key's among them (red team 30).
    again = [c for c in ordered if for_want_of_room(results[c].not_assessable or "")]
    whose = ctx.wait_for_room() if again else None
    if again and whose is not None:
        ctx.forget_for_room()
        try:
            for check_id in again:
                one(check_id)
        finally:
            ctx.wait_probes()
        ctx.disk_fills.append(
            f"{', '.join(again)}: run again once the workspace disk had room; it had none the first time, "
            f"and {whose or 'nothing says whose'}"
        )
    return {c: results[c] for c in ordered}


def _has_probes(check_id: str, checks: Mapping[str, Check]) -> bool:
    check = checks.get(check_id)
    return check is not None and check.probes is not None


def _start_background(ctx: Context, checks: list[Check]) -> None:
    """Start, before the first check, the background probes of each listed check that declares some.

    The probes (a record command run, a rerun of the suite without its tapes) overlap the replay suite and
    the other checks, each in a scratch copy it makes from the pristine copy of the
    checkout (`Context.keep_pristine`); their check waits for them (`Context.probe_result`).
    """
    for check in checks:
        if check.probes is not None:
            check.probes(ctx)


def _run_one(check: Check | None, check_id: str, ctx: Context) -> CheckResult:

    if check is None:
        reason = f"no check named {check_id!r} is installed"
        return CheckResult(facts={"summary": reason}, not_assessable=reason)
    try:
        result: object = check.func(ctx)  # a check module is code of its own: its return is checked below
    except NotAssessable as exc:
        return CheckResult(facts={"summary": f"not assessable: {exc.reason}"}, not_assessable=exc.reason)
    except Exception as exc:  # a bug in one check must cost one row, never the report
        if no_space(exc):  # the grader's disk, not the check's bug nor the submission's fault
            reason = f"{no_space_reason('workspace', ctx.workspace.root)} (check {check_id!r})"
            return CheckResult(facts={"summary": f"not assessable: {reason}"}, not_assessable=reason)
        reason = f"check {check_id!r} crashed: {describe(exc)}"
        return CheckResult(facts={"summary": reason}, crashed=reason)
    if not isinstance(result, CheckResult):
        reason = f"check {check_id!r} returned {type(result).__name__}, not a CheckResult"
        return CheckResult(facts={"summary": reason}, not_assessable=reason)
    result.facts.setdefault("summary", result.manual or result.not_assessable or "")
    return result


def unassessed_report(
    target: str, rubric: Rubric, reason: str, *, timings: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """A valid grade-report/1 for a run that graded nothing: every row not-assessable with ``reason``.

    What `grade` writes when the grader's own environment failed before anything could be graded, or when
    the grader hit an internal error, so automation always has a report to read.
    """

    reason = " ".join(str(reason).split())
    results = {
        row.check: CheckResult(facts={"summary": f"not assessable: {reason}"}, not_assessable=reason)
        for row in rubric.rows
    }
    try:
        iso: dict[str, Any] = asdict(isolation())
    except Exception:  # the report must not depend on the probe working
        iso = {"network": "pytest-socket only", "credentials": "scrubbed"}
    graded = _Graded(redact(target), None, None)
    return _report(graded, rubric, results, dict(timings or {}), [reason], iso)


def _uncommitted_note(commit: str, lines: tuple[str, ...], shown: int = 20) -> str:
    """The report note for a dirty checkout: graded as committed, and what was left out."""
    listed = "; ".join(" ".join(line.split()) for line in lines[:shown])
    more = f"; and {len(lines) - shown} more" if len(lines) > shown else ""
    return (
        f"graded as committed ({commit[:12]}): {len(lines)} uncommitted change(s) in the working tree were "
        f"not graded (commit them and grade again to include them): {listed}{more}"
    )


@dataclass(frozen=True)
class _Graded:
    """What a report says about the submission: the target as given, its commit, and the workspace folder
    whose paths evidence lines are made relative to (None: nothing was acquired)."""

    source: str
    commit: str | None
    root: Path | None


def _report(
    graded: _Graded,
    rubric: Rubric,
    results: dict[str, CheckResult],
    timings: dict[str, float],
    notes: list[str],
    iso: Mapping[str, Any],
) -> dict[str, Any]:
    root = graded.root

    def local(text: str) -> str:
        return submission_relative(text, root) if root else text

    rows = score(rubric, results)
    for row in rows:
        row.evidence = local(row.evidence)
        row.details = [local(line) for line in row.details]
    findings = [
        {"check": check_id, "rule": f.rule, "location": local(f.location), "message": local(f.message)}
        for check_id, result in results.items()
        for f in result.findings
    ]
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "target": graded.source,
        "commit": graded.commit or None,
        "graded_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "grader_version": __version__,
        "rubric": rubric.reference(),
        "isolation": dict(iso),
        "rows": [row.as_dict() for row in rows],
        "total": totals(rows),
        "facts": {check_id: jsonable(result.facts) for check_id, result in results.items()},
        "findings": findings,
        "timings": {k: max(0.0, v) for k, v in timings.items()},
        "notes": list(notes),  # always present ([] when there is none): a tool reads it without a guard
    }
    return report
