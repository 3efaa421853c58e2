"""What one grading run leaves behind in a folder, so it can be read, audited and re-scored later.

A stored run is a folder holding:

``run.json``      the manifest (``grade-run/1``): status, target, commit, grader version, the rubric used
                  (name, sha256, thresholds), the facts each check documented at grading time, the files
``results.json``  every check's full result: facts, findings, details, manual / not-assessable reasons
``report.json``   the grade-report/1 (and ``report.md``, plus any extra format asked for)
``rubric.yaml``   a byte copy of the rubric that produced the report
``logs/``         the raw evidence the grader read: audit logs, pytest result logs, JUnit XML, miss ledgers,
                  each named after its run (``NN-label.audit.jsonl``)

A target that could not be graded at all (unreachable URL, grader crash) stores only ``run.json`` with status
``not-assessable`` and the reason. Re-scoring (grader/rescore.py) reads ``results.json`` and never runs code.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader import __version__
from grader._json import jsonable, optional_text
from grader.checks import CheckResult, Finding, registry
from grader.errors import BadInput
from grader.report import render
from grader.safeio import read_bytes

if TYPE_CHECKING:
    from grader.rubric import Rubric

__all__ = [
    "MANIFEST",
    "RUN_SCHEMA",
    "StoredRun",
    "check_store_folder",
    "is_run",
    "load_run",
    "report_files",
    "results_to_json",
    "store_failure",
    "store_run",
    "write_json",
    "write_reports",
    "write_text",
]

RUN_SCHEMA = "grade-run/1"
RESULTS_SCHEMA = "grade-results/1"
MANIFEST = "run.json"
_RESULTS = "results.json"
_RUBRIC_COPY = "rubric.yaml"
_LOGS = "logs"
# Raw logs are written by submission processes: copy regular files only, never links, and cap their size.
_MAX_LOG_BYTES = 16 * 1024 * 1024
_MAX_LOG_TOTAL = 64 * 1024 * 1024
_MAX_LOG_FILES = 200
# The files a run's log folder holds that the grader named (`Context.log_path`, the guard's JUnit XML);
# anything else there was written by the run.
_LOG_SUFFIXES = (".audit.jsonl", ".results.jsonl", ".junit.xml", ".misses.jsonl")
_INDEX = "index.tsv"
_EXTENSIONS = {"json": "json", "markdown": "md", "text": "txt"}


@dataclass(frozen=True)
class StoredRun:
    """One stored run as read back: its folder, manifest, report and check results."""

    path: Path
    manifest: dict[str, Any]
    report: dict[str, Any] | None  # None when the target could not be graded
    results: dict[str, CheckResult]

    @property
    def status(self) -> str:
        return str(self.manifest.get("status", ""))

    @property
    def reason(self) -> str:
        return str(self.manifest.get("reason", ""))

    @property
    def target(self) -> str:
        return str(self.manifest.get("target", ""))

    @property
    def declared_facts(self) -> dict[str, list[str]]:
        """Check id -> the fact names that check documented when the run was graded."""
        checks = self.manifest.get("checks") or {}
        return {str(k): [str(f) for f in v] for k, v in checks.items() if isinstance(v, list)}


def check_store_folder(folder: Path) -> None:
    """Refuse (BadInput) a store folder that already holds files: a stored run is never overwritten."""
    if folder.exists() and not folder.is_dir():
        raise BadInput(f"{folder} exists and is not a folder; choose a new folder to store the run in")
    if folder.is_dir() and any(folder.iterdir()):
        raise BadInput(f"{folder} is not empty; choose a new folder (stored runs are never overwritten)")
    parent = folder.parent if str(folder.parent) else Path(".")
    if not parent.is_dir():
        raise BadInput(f"{folder}: folder {parent} does not exist; create it first")


def report_files(fmt: str) -> str:
    """The file name a report format is stored under (``report.md`` for markdown, ``report.<fmt>`` else)."""
    return f"report.{_EXTENSIONS.get(fmt, fmt)}"


def store_run(
    folder: Path,
    *,
    report: Mapping[str, Any],
    results: Mapping[str, CheckResult],
    rubric: Rubric,
    logs: Path | None = None,
    formats: Iterable[str] = ("json", "markdown"),
) -> Path:
    """Write a graded run into ``folder`` (created; must be new or empty). Returns the folder."""

    folder.mkdir(parents=True, exist_ok=True)
    checks = registry()
    declared = {
        check_id: sorted(checks[check_id].facts) if check_id in checks else sorted(result.facts)
        for check_id, result in results.items()
    }
    files: dict[str, Any] = {"results": _RESULTS}
    write_json(folder / _RESULTS, {"schema": RESULTS_SCHEMA, "checks": results_to_json(results)})
    if _copy_rubric(rubric.source, folder / _RUBRIC_COPY):
        files["rubric"] = _RUBRIC_COPY
    if logs is not None and logs.is_dir():
        copied = _copy_logs(logs, folder / _LOGS)
        if copied:
            files["logs"] = _LOGS
    files["reports"] = write_reports(folder, report, formats)
    files["report"] = files["reports"]["json"]
    manifest = {
        "schema": RUN_SCHEMA,
        "status": "graded",
        "target": report.get("target", ""),
        "commit": report.get("commit", ""),
        "graded_at": report.get("graded_at", ""),
        "grader_version": report.get("grader_version", __version__),
        "rubric": {**rubric.reference(), "thresholds": dict(rubric.thresholds)},
        "checks": declared,
        "files": files,
    }
    write_json(folder / MANIFEST, manifest)
    return folder


def store_failure(folder: Path, *, target: str, reason: str) -> Path:
    """Record a target that could not be graded (unreachable, crash): only run.json, with the reason."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {
        "schema": RUN_SCHEMA,
        "status": "not-assessable",
        "target": target,
        "reason": " ".join(str(reason).split()),
        "graded_at": _now(),
        "grader_version": __version__,
        "files": {},
    }
    write_json(folder / MANIFEST, manifest)
    return folder


def write_reports(folder: Path, report: Mapping[str, Any], formats: Iterable[str]) -> dict[str, str]:
    """Render ``report`` in each format into ``folder``; returns {format: file name}."""

    written: dict[str, str] = {}
    for fmt in dict.fromkeys(["json", *formats]):
        name = report_files(fmt)
        write_text(folder / name, render(dict(report), fmt))
        written[fmt] = name
    return written


def is_run(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()


def load_run(folder: Path) -> StoredRun:
    """Read a stored run back; a missing or malformed file is BadInput naming the file."""

    manifest = _read_json(folder / MANIFEST)
    if manifest.get("schema") != RUN_SCHEMA:
        raise BadInput(
            f"{folder / MANIFEST}: not a stored run "
            f"(schema {manifest.get('schema')!r}, expected {RUN_SCHEMA!r})"
        )
    if manifest.get("status") != "graded":
        return StoredRun(folder, manifest, None, {})
    files = manifest.get("files") or {}
    report = _read_json(folder / str(files.get("report", "report.json")))
    raw = _read_json(folder / str(files.get("results", _RESULTS)))
    checks = raw.get("checks")
    if raw.get("schema") != RESULTS_SCHEMA or not isinstance(checks, dict):
        raise BadInput(f"{folder / _RESULTS}: not a {RESULTS_SCHEMA} file; the run cannot be re-scored")
    results: dict[str, CheckResult] = {}
    for check_id, item in checks.items():
        if not isinstance(item, dict) or not isinstance(item.get("facts"), dict):
            raise BadInput(
                f"{folder / _RESULTS}: check {check_id!r} has no facts; the run cannot be re-scored"
            )
        findings = [
            Finding(str(f.get("rule", "")), str(f.get("message", "")), str(f.get("location", "")))
            for f in item.get("findings") or []
            if isinstance(f, dict)
        ]
        results[str(check_id)] = CheckResult(
            facts=dict(item["facts"]),
            findings=findings,
            details=[str(d) for d in item.get("details") or []],
            manual=optional_text(item.get("manual")),
            not_assessable=optional_text(item.get("not_assessable")),
            crashed=optional_text(item.get("crashed")),
        )
    return StoredRun(folder, manifest, report, results)


def results_to_json(results: Mapping[str, CheckResult]) -> dict[str, Any]:
    """Check results as plain JSON (sets sorted, unknown objects as strings)."""
    return {
        check_id: {
            "facts": jsonable(result.facts),
            "findings": [
                {"rule": f.rule, "message": f.message, "location": f.location} for f in result.findings
            ],
            "details": [str(d) for d in result.details],
            "manual": result.manual,
            "not_assessable": result.not_assessable,
            "crashed": result.crashed,
        }
        for check_id, result in results.items()
    }


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder + rename, so a reader never sees half a file.

    A lone surrogate (a submission's skip reason or output, kept raw in the stored facts: red team 7, R7-3)
    is written as its ``\\udXXX`` escape, which inside a JSON string is the same character again."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(
            f"{path}: missing; is this a folder written by `grade --store` or `grade batch`?"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}:1: expected a JSON object")
    return data


def _copy_rubric(source: bytes, dest: Path) -> bool:
    # The bytes the report's rubric sha256 names: a rubric that extends another is stored resolved.
    try:
        dest.write_bytes(source)
    except OSError:
        return False
    return True


def _log_files(source: Path) -> list[tuple[str, Path]]:
    """(stored name, path) of each log the grader named, by ``logs/index.tsv`` (which no run sees): in each
    run's folder only ``run<suffix>`` for the grader's suffixes, stored as ``<NN-label><suffix>``. Every run
    names its logs alike (``run.audit.jsonl``), so copied flat they overwrote each other; and a run may put
    files of its own in its folder (red team 13: a hundred sparse 16 MB files, stored as 1.6 GB of zeros,
    and files named like the grader's reports)."""
    try:
        index = read_bytes(source / _INDEX, cap=1 << 20).decode("utf-8", "replace")
    except OSError:
        return []
    out: list[tuple[str, Path]] = [(_INDEX, source / _INDEX)]
    for line in index.splitlines():
        folder, _, named = line.partition("\t")
        suffix = next((x for x in _LOG_SUFFIXES if named.endswith(x)), None)
        if not folder or "/" in folder or folder.startswith(".") or suffix is None:
            continue
        label = named[: -len(suffix)]
        out += [(label + extra, source / folder / f"run{extra}") for extra in _LOG_SUFFIXES]
    return out


def _copy_logs(source: Path, dest: Path) -> int:
    """Copy the grader's log files of ``source`` (no links, nothing else), each up to a size cap and all up
    to a total, into ``dest``."""
    copied = 0
    left = _MAX_LOG_TOTAL
    for name, path in _log_files(source):
        if copied >= _MAX_LOG_FILES or left <= 0:
            break
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as src:
            if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                continue
            dest.mkdir(exist_ok=True)
            with open(dest / name, "wb") as out:
                shutil.copyfileobj(_Capped(src, min(_MAX_LOG_BYTES, left)), out)
                left -= out.tell()
        copied += 1
    return copied


class _Capped:
    """A file reader that stops after ``limit`` bytes (a runaway audit log must not fill the disk twice)."""

    def __init__(self, handle: Any, limit: int) -> None:
        self._handle = handle
        self._left = limit

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        size = self._left if size < 0 else min(size, self._left)
        data: bytes = self._handle.read(size)
        self._left -= len(data)
        return data


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
