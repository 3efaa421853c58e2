"""Loud-miss's unrecorded-input probe: the suite's own inputs that no tape holds, asked of the triage command.

Red team 15, F2: a cassette layer that on a miss invents an answer only for a few messages it lists by
their digest (every other miss still loud) passes its suite on a ticket never recorded, and every other
probe of this row stays loud (they send messages the layer does not list). Its test looks like a parser
test from outside: it passes with the tapes withheld too. What gives it away is what the audit hook saw
(it files each open under the test that made it): in the suite's own run the test passed having tried to
open a tape that does not exist.

Such a test's inputs are in the repository: the strings of the data files it opened, or that were opened
while no test ran (a test module reading its cases at import), in JSON, JSON lines, CSV or plain lines, and
the string literals of its test file. Each of them that no tape's request holds as its last user message
is given to the triage command, offline, tapes in place, as the unseen message is: a command that prints
an answer for it (whatever its exit status) made that answer up. An honest test of a miss (it expects the
layer to raise) passes the same way and is asked about too; its messages then fail loudly, as they should.
At most 10 strings are asked, data files first.
"""

from __future__ import annotations

import ast
import csv
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from grader.checks.ask_in_suite import ask
from grader.drift_run import find_tickets, printed_objects
from grader.errors import NotAssessable
from grader.perturb import strings_in
from grader.safeio import read_bytes
from grader.tapes import tapes_of

if TYPE_CHECKING:
    from grader.context import Context, ReplayRun

__all__ = ["Made", "Unrecorded", "unrecorded_inputs"]

LABEL = "unrecorded-inputs"
_MAX_ASKED = 10
_MAX_SUSPECTS = 50
_FILE_CAP = 2_000_000
_MIN_CHARS, _MAX_CHARS, _MIN_WORDS = 12, 2_000, 3
_PASSED = ("passed", "xpassed")
_DATA_SUFFIXES = (".json", ".jsonl", ".ndjson", ".csv", ".tsv", ".txt")


@dataclass(frozen=True)
class Made:
    """A string of the suite's inputs that no tape holds, answered by the triage command."""

    test: str
    where: str  # file:line of the string
    message: str
    said: str


@dataclass
class Unrecorded:
    suspects: int = 0  # tests that passed having tried a tape path that does not exist
    asked: int = 0  # strings given to the triage command
    made: list[Made] = field(default_factory=list)


def _suspects(ctx: Context, rr: ReplayRun, cassette_dir: Path) -> list[str]:
    if rr.guard is None:
        return []
    folder = PurePosixPath(cassette_dir.as_posix())
    out = []
    for test, outcome in rr.guard.outcomes.items():
        if outcome not in _PASSED:
            continue
        tapes = [p for p in rr.audit.opened_by.get(test, ()) if PurePosixPath(p).is_relative_to(folder)]
        # Any path that does not exist: a layer may read a recorded tape on a miss (the nearest one, to
        # say how the request differs), honest or not.
        if any(not _exists(ctx.repo, p) for p in tapes):
            out.append(test)
    return sorted(out)[:_MAX_SUSPECTS]


def _exists(repo: Path, rel: str) -> bool:
    # The run wrote the audit log: a path in it that leaves the repository says nothing about a tape.
    if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
        return True
    try:
        (repo / rel).lstat()
    except OSError:
        return False
    return True


def _read(repo: Path, rel: str) -> str | None:
    try:
        raw = read_bytes(repo / rel, cap=_FILE_CAP, root=repo)
    except OSError:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _fit(text: str) -> bool:
    stripped = text.strip()
    return _MIN_CHARS <= len(stripped) <= _MAX_CHARS and len(stripped.split()) >= _MIN_WORDS


def _data_strings(rel: str, text: str) -> Iterator[tuple[str, int]]:
    """(string, line) of a data file's values."""
    suffix = PurePosixPath(rel).suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        lines = text.splitlines() if suffix != ".json" else [text]
        for number, line in enumerate(lines, 1):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            for item in strings_in(value):
                yield item, number if suffix != ".json" else text.count("\n", 0, max(0, text.find(item))) + 1
    elif suffix in (".csv", ".tsv"):
        reader = csv.reader(io.StringIO(text), delimiter="\t" if suffix == ".tsv" else ",")
        for row in reader:
            for item in row:
                yield item, reader.line_num
    else:
        for number, line in enumerate(text.splitlines(), 1):
            yield line, number


def _literals(text: str) -> Iterator[tuple[str, int]]:
    """(string, line) of a Python file's string constants, docstrings left out."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.add(id(value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value, node.lineno


def _candidates(
    ctx: Context, rr: ReplayRun, tests: list[str], recorded: set[str]
) -> list[tuple[str, str, str]]:
    """(test, file:line, string) to ask about, data files first, at most `_MAX_ASKED`. A data file counts
    when the test opened it, or when it was opened while no test ran (a test module reading its cases when
    pytest imports it)."""
    data: dict[str, tuple[str, str]] = {}
    code: dict[str, tuple[str, str]] = {}
    # The tapes are not the suite's inputs (red team 18: a conftest that reads every tape at the session's
    # end filled the budget with their prompts before the data file holding the unrecorded ticket).
    tapes = {tape.path for tape in tapes_of(ctx)}
    for test in tests:
        for rel in sorted(rr.audit.opened_by.get(test, set()) | rr.audit.opened_by.get("", set())):
            if rel in tapes or not rel.lower().endswith(_DATA_SUFFIXES) or not _exists(ctx.repo, rel):
                continue
            text = _read(ctx.repo, rel)
            for item, line in _data_strings(rel, text or ""):
                if _fit(item) and item.strip() not in recorded:
                    data.setdefault(item.strip(), (test, f"{rel}:{line}"))
        source = test.split("::", 1)[0]
        text = _read(ctx.repo, source) if source.endswith(".py") else None
        for item, line in _literals(text or ""):
            if _fit(item) and item.strip() not in recorded:
                code.setdefault(item.strip(), (test, f"{source}:{line}"))
    ordered = [*data.items(), *((k, v) for k, v in code.items() if k not in data)]
    return [(test, where, message) for message, (test, where) in ordered[:_MAX_ASKED]]


def unrecorded_inputs(
    ctx: Context, rr: ReplayRun, command: list[str], env: Mapping[str, str]
) -> Unrecorded | None:
    """Ask the triage command about the unrecorded inputs of tests that passed on a miss; None when the
    suite's run left no per-test outcomes or there is no cassette folder."""
    cassette_dir = ctx.manifest.cassette_dir
    if cassette_dir is None or rr.guard is None:
        return None
    tests = _suspects(ctx, rr, cassette_dir)
    found = Unrecorded(suspects=len(tests))
    if not tests:
        return found
    recorded = {t.message.strip() for t in find_tickets(ctx)}
    asked = _candidates(ctx, rr, tests, recorded)
    if not asked:
        return found
    copy = ctx.scratch_copy(LABEL)
    for test, where, message in asked:
        try:
            run, _ = ask(ctx, copy, command, message, env, LABEL, beside=test)
        except NotAssessable:
            break
        found.asked += 1
        answer = next((a for a in printed_objects(run.stdout) if "intent" in a or "needs_human" in a), None)
        if answer is not None:  # printed, whatever the exit status: a default made up for the reader
            said = json.dumps(answer, sort_keys=True)
            found.made.append(Made(test, where, message, said if len(said) <= 120 else said[:117] + "..."))
    return found
