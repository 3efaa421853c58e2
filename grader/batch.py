"""`grade batch FILE`: grade many submissions in parallel into one output folder, with a summary.

FILE is one target per line (blank lines and ``#`` comment lines ignored), or a CSV whose header has a
``candidate`` column and a ``target`` (or ``repo``) column. A first line with a comma (or a ``.csv`` file)
is a CSV header, and one without a ``candidate`` column is bad input: it is never graded as a target.
``--shard I/N`` grades one slice (``Shard``) and records it for `grade merge` (grader/merge.py).

The output folder holds one stored run per
candidate (grader/runstore.py), ``summary.csv``, ``summary.md`` and ``batch.json`` (``grade-batch/1``: which
candidate is in which folder, and why a candidate could not be graded). One candidate's failure (an
unreachable URL, a crash inside the grader) is recorded as "not assessable" with the reason and never stops
the batch.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import threading
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.acquire import no_space, no_space_reason
from grader.checks import registry
from grader.context import for_want_of_room
from grader.deeptree import remove_tree
from grader.errors import BadInput, NotAssessable
from grader.grading import grade
from grader.inert import csv_cell, inert, inert_tree
from grader.progress import Display, QuietDisplay
from grader.runstore import check_store_folder, store_failure, write_json, write_text

if TYPE_CHECKING:
    from grader.rubric import Rubric

__all__ = [
    "BATCH_FILE",
    "BATCH_SCHEMA",
    "RUBRIC_COPY",
    "Entry",
    "Outcome",
    "Shard",
    "default_out",
    "parse_shard",
    "read_batch_file",
    "run_batch",
    "run_digests",
    "write_summary",
]

BATCH_SCHEMA = "grade-batch/1"
BATCH_FILE = "batch.json"
NOT_ASSESSABLE = "not assessable"
_TARGET_COLUMNS = ("target", "repo")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip", ".git")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
RUBRIC_COPY = "rubric.yaml"  # a sharded batch keeps the rubric's bytes, so `grade merge` can check and use it
_RESERVED = {"history", "summary.csv", "summary.md", BATCH_FILE, RUBRIC_COPY}


@dataclass(frozen=True)
class Shard:
    """``--shard I/N``: the I-th (1-based) of N deterministic slices of a batch file."""

    index: int
    count: int

    def pick(self, entries: Sequence[Entry]) -> list[Entry]:
        """Every N-th candidate starting at the I-th, in file order: slow candidates listed together are
        spread over the runners, and the same FILE and N always give the same slices."""
        return list(entries[self.index - 1 :: self.count])

    def label(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/5"`` -> Shard(2, 5); BadInput naming the option otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise BadInput(f"--shard must be I/N like 2/5 (the I-th of N slices), got {text!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if not 1 <= index <= count:
        raise BadInput(f"--shard {text}: I must be between 1 and N ({count})")
    return Shard(index, count)


@dataclass(frozen=True)
class Entry:
    """One line of the batch file."""

    candidate: str  # as written (CSV) or derived from the target
    target: str
    line: int
    folder: str  # the candidate's folder name in the output folder (unique, filesystem-safe)


@dataclass
class Outcome:
    """What happened to one candidate: a report, or the reason there is none."""

    entry: Entry
    status: str  # "graded" | NOT_ASSESSABLE
    reason: str = ""
    report: dict[str, Any] | None = None


# ------------------------------------------------------------------------------------------ the file


def read_batch_file(path: Path) -> list[Entry]:
    """Parse FILE; any problem is BadInput("FILE:LINE: ...")."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise BadInput(f"{path}: batch file not found") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a folder; give a file with one target per line, or a CSV") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise BadInput(f"{path}:{line}: not UTF-8 text; save the batch file as UTF-8") from None
    lines = text.splitlines()
    first = next((i for i, raw in enumerate(lines) if _meaningful(raw)), None)
    if first is None:
        raise BadInput(f"{path}:1: no targets; write one target per line, or a CSV with candidate,target")
    header = [h.strip().lower() for h in next(csv.reader([lines[first]]))]
    for separator, shown in ((";", "';'"), ("\t", "tabs"), ("|", "'|'")):
        if "candidate" not in header and "candidate" in [
            h.strip().lower() for h in lines[first].split(separator)
        ]:
            raise BadInput(
                f"{path}:{first + 1}: the CSV is separated by {shown}, not commas; save it with commas "
                "(candidate,target or candidate,repo)"
            )
    if "candidate" in header:
        pairs = _read_csv(path, text)
    elif path.suffix.lower() == ".csv" or len(header) > 1:
        # A target never holds a comma: this is a CSV header without the column that names candidates.
        found = ", ".join(h for h in header if h) or "none"
        raise BadInput(
            f"{path}:{first + 1}: the CSV header has no 'candidate' column (found: {found}); expected "
            "columns: candidate,target (or candidate,repo); or list one target per line with no header"
        )
    else:
        pairs = [(None, raw.strip(), n) for n, raw in enumerate(lines, 1) if _meaningful(raw)]
    return _entries(path, pairs)


def _meaningful(raw: str) -> bool:
    stripped = raw.strip()
    return bool(stripped) and not stripped.startswith("#")


def _read_csv(path: Path, text: str) -> list[tuple[str | None, str, int]]:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    pairs: list[tuple[str | None, str, int]] = []
    columns: tuple[int, int] = (0, 0)
    for cells in reader:
        line = reader.line_num
        if not any(c.strip() for c in cells) or cells[0].strip().startswith("#"):
            continue
        if header is None:
            header = [c.strip().lower() for c in cells]
            target_col = next((header.index(c) for c in _TARGET_COLUMNS if c in header), None)
            if target_col is None:
                found = ", ".join(h for h in header if h) or "none"
                raise BadInput(
                    f"{path}:{line}: the CSV header needs a 'target' or 'repo' column next to 'candidate' "
                    f"(found: {found})"
                )
            columns = (header.index("candidate"), target_col)
            continue
        name, target = (cells[i].strip() if i < len(cells) else "" for i in columns)
        if not name:
            raise BadInput(f"{path}:{line}: the candidate column is empty")
        if not target:
            raise BadInput(f"{path}:{line}: candidate {name!r} has no target")
        pairs.append((name, target, line))
    if not pairs:
        raise BadInput(f"{path}:1: the CSV has a header but no candidates")
    return pairs


def _entries(path: Path, pairs: list[tuple[str | None, str, int]]) -> list[Entry]:
    entries: list[Entry] = []
    seen_names: dict[str, int] = {}
    used_folders: set[str] = set()
    for name, target, line in pairs:
        if name is not None:
            if name.lower() in seen_names:
                first = seen_names[name.lower()]
                raise BadInput(f"{path}:{line}: candidate {name!r} appears twice (first on line {first})")
            seen_names[name.lower()] = line
        shown = name if name is not None else _name_from_target(target)
        folder = _unique(_slug(shown), used_folders)
        if name is None:
            shown = folder  # derived names are shown as their (unique) folder
        entries.append(Entry(candidate=shown, target=target, line=line, folder=folder))
    return entries


def _name_from_target(target: str) -> str:
    text = target.split("#", 1)[0].rstrip("/")
    is_url = "://" in text or re.match(r"^[\w.-]+@[\w.-]+:", text) is not None
    parts = [p for p in re.split(r"[/:]", text) if p]
    for suffix in _ARCHIVE_SUFFIXES:
        if parts and parts[-1].lower().endswith(suffix) and len(parts[-1]) > len(suffix):
            parts[-1] = parts[-1][: -len(suffix)]
            break
    if is_url and len(parts) >= 3:  # scheme/host/owner/repo: owner-repo says who it is
        return f"{parts[-2]}-{parts[-1]}"
    return parts[-1] if parts else "candidate"


def _slug(name: str) -> str:
    return _UNSAFE.sub("-", name).strip("-.")[:80] or "candidate"


def _unique(base: str, used: set[str]) -> str:
    name, n = base, 1
    while name.lower() in used or name.lower() in _RESERVED:
        n += 1
        name = f"{base}-{n}"
    used.add(name.lower())
    return name


def default_out(shard: Shard | None = None) -> Path:
    """``grade-batch-<UTC timestamp>`` in the current folder (``...-shard-I-of-N`` for a shard)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    suffix = f"-shard-{shard.index}-of-{shard.count}" if shard is not None else ""
    return Path(f"grade-batch-{stamp}{suffix}")


# -------------------------------------------------------------------------------------------- grading


def run_batch(
    entries: Sequence[Entry],
    *,
    rubric: Rubric,
    out: Path,
    source: Path | None = None,
    jobs: int | None = None,
    timeout: float = 300.0,
    cache_root: Path | None = None,
    formats: Sequence[str] = ("json", "markdown"),
    display: Display | None = None,
    shard: Shard | None = None,
    listed: int | None = None,
    budget: float | None = None,
) -> list[Outcome]:
    """Grade every entry (``jobs`` at a time, default: the number of cores) into ``out``; never raises
    for one candidate's failure. ``out`` must be new or empty. With ``shard``, ``entries`` are that slice
    of the ``listed`` candidates in ``source``, and the folder records it (and the rubric) for `grade merge`.
    """

    check_store_folder(out)
    out.mkdir(parents=True, exist_ok=True)
    registry()  # import every check once, before threads race to do it
    shown = display or QuietDisplay(io.StringIO())
    steps = 2 + len({row.check for row in rubric.rows})
    formats = tuple(dict.fromkeys(["json", "markdown", *formats]))
    write_lock = threading.Lock()
    outcomes: dict[int, Outcome] = {}

    def one(index: int) -> None:
        entry = entries[index]
        outcome = _grade_one(entry, rubric, out, timeout, cache_root, formats, shown, steps, budget)
        with write_lock:
            outcomes[index] = outcome

    workers = max(1, min(jobs or os.cpu_count() or 1, len(entries)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grade")
    try:
        for future in [pool.submit(one, i) for i in range(len(entries))]:
            future.result()
    except BaseException:
        # Ctrl-C: start no other candidate; the ones running finish their current command.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    if workers > 1:
        # Graded beside another candidate whose flood left the shared workspace disk no room (red team 30):
        # rows not assessable for that are graded again once the others are done, one candidate at a time.
        for index in [i for i in range(len(entries)) if _short_of_room(outcomes[i])]:
            entry = entries[index]
            first = _short_of_room(outcomes[index])
            remove_tree(out / entry.folder)  # this batch's own first try, minutes old
            why = (
                "graded again, alone, after the rest of the batch: the first grade, beside other candidates, "
                f"had rows the full workspace disk left unassessed ({first})"
            )
            outcomes[index] = _grade_one(
                entry, rubric, out, timeout, cache_root, formats, shown, steps, budget, notes=(why,)
            )
    ordered = [outcomes[i] for i in range(len(entries))]
    try:
        _write_batch_files(out, ordered, rubric, source, shard, listed, entries)
    except OSError as exc:
        if no_space(exc):  # every candidate's stored run is kept; only the summary is missing
            raise NotAssessable(f"{no_space_reason('output folder', out)}: summary not written") from None
        raise
    return ordered


def _write_batch_files(
    out: Path,
    ordered: list[Outcome],
    rubric: Rubric,
    source: Path | None,
    shard: Shard | None,
    listed: int | None,
    entries: Sequence[Entry],
) -> None:
    write_summary(out, ordered, rubric)
    manifest = _manifest(ordered, rubric, source)
    if shard is not None:
        (out / RUBRIC_COPY).write_bytes(rubric.source)  # resolved when it extends another rubric
        manifest["shard"] = {
            "index": shard.index,
            "count": shard.count,
            "listed": len(entries) if listed is None else listed,
            "source_sha256": _sha256(source) if source is not None else "",
            # What each candidate's stored files held when graded, for `grade merge` to refuse an edited one.
            "digests": _run_digests(out, ordered),
        }
    write_json(out / BATCH_FILE, inert_tree(manifest))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_DIGESTED = ("report.json", "run.json", "results.json")


def run_digests(folder: Path) -> dict[str, str]:
    """sha256 of the stored run's report, run record and check results (the files scores come from)."""
    return {name: _sha256(folder / name) for name in _DIGESTED if (folder / name).is_file()}


def _run_digests(out: Path, outcomes: list[Outcome]) -> dict[str, dict[str, str]]:
    return {o.entry.folder: run_digests(out / o.entry.folder) for o in outcomes}


def _grade_one(
    entry: Entry,
    rubric: Rubric,
    out: Path,
    timeout: float,
    cache_root: Path | None,
    formats: tuple[str, ...],
    display: Display,
    steps: int,
    budget: float | None = None,
    notes: Sequence[str] = (),
) -> Outcome:

    folder = out / entry.folder
    who = entry.candidate
    display.start(who, steps)

    def progress(step: str, seconds: float, message: str) -> None:
        display.step(who, step, seconds, message)

    try:
        report = grade(
            entry.target,
            rubric=rubric,
            timeout=timeout,
            budget=budget,
            cache_root=cache_root,
            progress=progress,
            store=folder,
            store_formats=formats,
            notes=notes,
        )
    except BadInput as exc:
        return _failed(entry, folder, str(exc), display, store_failure)
    except NotAssessable as exc:  # the grader's own environment failed (a full disk): say so plainly
        return _failed(entry, folder, exc.reason, display, store_failure)
    except Exception as exc:  # a grader bug costs this candidate, never the batch
        if os.environ.get("GRADE_DEBUG") == "1":  # as for one grade: the traceback, for the bug report
            traceback.print_exc()
        detail = " ".join(str(exc).split())[:300]
        reason = f"internal error in the grader: {type(exc).__name__}{': ' + detail if detail else ''}"
        return _failed(entry, folder, reason, display, store_failure)
    total = report["total"]
    display.finish(who, f"graded {total['points']}/{total['max']} ({total['percent']}%) -> {entry.folder}/")
    return Outcome(entry, "graded", report=report)


def _short_of_room(outcome: Outcome) -> str:
    """Why the full workspace disk, nothing the candidate did, left it or one of its rows unassessed (the
    first such row's evidence); "" when it did not."""
    if outcome.status == NOT_ASSESSABLE:
        return outcome.reason if for_want_of_room(outcome.reason) else ""
    for row in (outcome.report or {}).get("rows") or []:
        evidence = str(row.get("evidence") or "")
        if row.get("status") == "not-assessable" and for_want_of_room(evidence):
            return f"{row.get('id')}: {evidence}"
    return ""


def _failed(entry: Entry, folder: Path, reason: str, display: Display, store_failure: Any) -> Outcome:
    try:
        store_failure(folder, target=entry.target, reason=reason)
    except OSError as exc:
        reason = f"{reason} (and its folder could not be written: {exc})"
    display.finish(entry.candidate, f"{NOT_ASSESSABLE}: {reason}")
    return Outcome(entry, NOT_ASSESSABLE, reason=reason)


def _manifest(outcomes: Sequence[Outcome], rubric: Rubric, source: Path | None) -> dict[str, Any]:
    return {
        "schema": BATCH_SCHEMA,
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": str(source) if source is not None else "",
        "rubric": rubric.reference(),
        "candidates": [
            {
                "candidate": o.entry.candidate,
                "target": o.entry.target,
                "line": o.entry.line,
                "folder": o.entry.folder,
                "status": o.status,
                "reason": o.reason,
            }
            for o in outcomes
        ],
    }


# -------------------------------------------------------------------------------------------- summary


def write_summary(out: Path, outcomes: Sequence[Outcome], rubric: Rubric) -> None:
    """summary.csv and summary.md: a line per candidate, each row's score by row id, a link to the report."""
    row_ids = [row.id for row in rubric.rows]
    write_text(out / "summary.csv", _csv(outcomes, row_ids))
    write_text(out / "summary.md", _markdown(outcomes, row_ids, rubric))


_NOT_ASSESSED = "n/a"  # a row's cell when the row (or the whole candidate) could not be assessed


def _row_cell(report: dict[str, Any], row_id: str) -> str:
    row = next((r for r in report.get("rows") or [] if r.get("id") == row_id), None)
    if row is None:
        return ""
    if row.get("status") == "scored" and row.get("score") is not None:
        return str(row["score"])
    return "manual" if row.get("status") == "manual" else _NOT_ASSESSED


def _csv(outcomes: Sequence[Outcome], row_ids: list[str]) -> str:
    buffer = io.StringIO()
    # Every cell through csv_cell: a reason or target starting with "=" must not run in a spreadsheet.
    writer = _SafeWriter(csv.writer(buffer, lineterminator="\n"))
    writer.writerow(
        ["candidate", "target", "status", "points", "max", "percent", *row_ids, "report", "reason"]
    )
    for o in outcomes:
        if o.report is None:
            # No total to give (empty, so a spreadsheet's sums skip it); every row "n/a", as for a row that
            # was not assessable; no report.
            cells = ["", "", "", *[_NOT_ASSESSED] * len(row_ids), ""]
            writer.writerow([o.entry.candidate, o.entry.target, o.status, *cells, o.reason])
            continue
        total = o.report["total"]
        writer.writerow(
            [
                o.entry.candidate,
                o.entry.target,
                o.status,
                total["points"],
                total["max"],
                total["percent"],
                *(_row_cell(o.report, r) for r in row_ids),
                f"{o.entry.folder}/report.md",
                "",
            ]
        )
    return buffer.getvalue()


class _SafeWriter:
    def __init__(self, writer: Any) -> None:
        self._writer = writer

    def writerow(self, cells: Sequence[Any]) -> None:
        self._writer.writerow([csv_cell(cell) for cell in cells])


def _md(text: Any) -> str:
    return " ".join(inert(str(text)).split()).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _markdown(outcomes: Sequence[Outcome], row_ids: list[str], rubric: Rubric) -> str:
    graded = sum(1 for o in outcomes if o.report is not None)
    lines = [
        "# Batch summary",
        "",
        f"- **Rubric:** {_md(rubric.name)} (`{rubric.sha256[:12]}`)",
        f"- **Candidates:** {len(outcomes)} ({graded} graded, {len(outcomes) - graded} {NOT_ASSESSABLE})",
        "",
        "| candidate | total | % | " + " | ".join(f"`{r}`" for r in row_ids) + " | status | report |",
        "| --- | ---: | ---: | " + " | ".join(":---:" for _ in row_ids) + " | --- | --- |",
    ]
    for o in outcomes:
        if o.report is None:
            cells = ["", "", *[_NOT_ASSESSED] * len(row_ids), _md(f"{NOT_ASSESSABLE}: {o.reason}"), ""]
        else:
            total = o.report["total"]
            link = f"[report]({_link(o.entry.folder)}/report.md)"
            cells = [
                f"{total['points']}/{total['max']}",
                str(total["percent"]),
                *(_row_cell(o.report, r) for r in row_ids),
                o.status,
                link,
            ]
        lines.append(f"| {_md(o.entry.candidate)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _link(folder: str) -> str:
    # Folder names are [A-Za-z0-9._-] (see _slug): nothing to escape in a Markdown link target.
    return folder
