"""Tape history as evidence: a recorded response changed in a later commit while its request did not.

A tape is a recording; a candidate who re-records changes the whole set at once (every answer is asked again).
A commit that changes the *answer* of one tape while its request (and, for the kit's tapes, its key) stays
as it was is an edit by hand: a failing label made to pass. Each such change is a `TapeEdit` naming the
commit that had the recorded answer, the commit that changed it, and the tape's ``file:line``.

Not an edit: a tape deleted, a tape whose request changed (a new recording), and a commit that re-records
the whole set: it gives every tape the set held before it a new answer (a new key, a changed request or a
changed response). Restamping every tape's ``recorded_at`` (or other metadata) in the commit that edits one
answer is not a re-recording: the other answers stayed as they were. A tape moved in a commit is compared
with what it was, and a tape deleted and later put back at the same path with the version deleted, so
neither launders an edit. Headers are not compared (a re-recording changes ``date``), only status and body.

History is read from the first-parent line of HEAD (what is graded), merges compared with their first
parent, through one hardened git call (`_git`): no system or global config, no hooks, no fsmonitor, no
signatures, no textconv or external diff, no replace objects, literal pathspecs.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import gitsafe
from grader.tapes import DISCOVERY_DIRS, MAX_PARSE_BYTES, TAPE_SUFFIXES, Interaction, Tape, _parse

__all__ = ["TapeEdit", "TapeHistory", "tape_edits"]

_RESPONSE_KEY = re.compile(r'^\s*"?response"?\s*:')  # where the answer starts, JSON or YAML
_SHORT = 7  # commit ids as the history scan shows them
_RAW_DIFF = ("--raw", "--no-abbrev", "--no-textconv", "--no-ext-diff")  # `git diff` takes no signature flag
_MAX_MERGES = 500  # first-parent merges whose other parents are asked for older tape versions (newest first)
_MAX_PAIRS = 20_000  # changed tape versions compared per grade; more is noted, never a crash
_MAX_HISTORY_BYTES = 64 * 2**20  # tape versions read per grade (old + new); more is noted


@dataclass(frozen=True)
class TapeEdit:
    """One tape whose recorded response changed in ``after`` while its request stayed as in ``before``."""

    path: str  # repo-relative tape path
    line: int  # line of the changed interaction's response in the ``after`` version (1 when unknown)
    before: str  # short sha of the commit whose version held the original answer
    after: str  # short sha of the commit that changed the answer
    request: str  # e.g. "POST /v1/chat/completions"

    @property
    def location(self) -> str:
        return f"{self.after}:{self.path}:{self.line}"

    @property
    def message(self) -> str:
        return (
            f"{self.path}: the recorded response of {self.request} was changed in {self.after}, "
            f"its request unchanged since {self.before} (not a re-recording of the whole set)"
        )


@dataclass
class TapeHistory:
    """What `tape_edits` found: the edits, and notes on what it did not compare."""

    edits: list[TapeEdit]
    notes: list[str]


def tape_edits(repo: Path, cassette_dir: Path | str | None) -> TapeHistory:
    """Every hand edit of a recorded response in the history of ``repo``'s tapes (oldest first)."""
    dirs = [Path(cassette_dir).as_posix()] if cassette_dir is not None else list(DISCOVERY_DIRS)
    try:
        log = _git(
            repo,
            "log",
            "--reverse",
            "--first-parent",
            "--diff-merges=first-parent",
            *gitsafe.RAW_LOG,
            "--find-renames",  # a tape moved and edited in one commit is compared with what it was
            "--format=@%H",
            "HEAD",
            "--",
            *dirs,
        )
    except (OSError, _GitError):
        return TapeHistory([], [])  # no history (a folder, an archive without .git): nothing to compare
    # (path, old blob, new blob, commit that held the answer, commit that changed the tape), every tape a
    # commit modified: whether the commit re-recorded the whole set is only known once the answers are read.
    pairs: list[tuple[str, str, str, str, str]] = []
    sets: dict[str, bool] = {}  # commit -> it modified every tape the set held before it
    current: dict[str, tuple[str, str]] = {}  # tape path -> (commit that last wrote it, its blob)
    # Deleted tapes: a tape deleted in one commit and put back (same path) in a later one is compared with
    # the version that was deleted, like a modification: deleting and re-adding does not launder an edit.
    gone: dict[str, tuple[str, str]] = {}
    compared_once: set[str] = set()  # tapes the first-parent line ever gave a second version
    for commit, changes in _commits(log.decode("utf-8", "surrogateescape")):
        tapes = {p: c for p, c in changes.items() if p.lower().endswith(TAPE_SUFFIXES)}
        # (path, the version it is compared with: (commit that held it, blob)) for every tape this commit
        # gives a new version of one the history already had: modified, moved, or put back after deletion.
        compared: dict[str, tuple[str, str]] = {}
        for path, (status, _old, _new, source) in tapes.items():
            if status == "M" and path in current:
                compared[path] = current[path]
            elif status == "R" and source in current:
                compared[path] = current[source]
            elif status == "A" and path in gone:
                compared[path] = gone[path]
        moved = {source for status, _, _, source in tapes.values() if status == "R"}
        existing = {p for p in current if tapes.get(p, ("",))[0] != "D" and p not in moved}
        sets[commit] = bool(compared) and set(compared) >= existing
        compared_once.update(compared)
        for path, (status, _old, new, source) in sorted(tapes.items()):
            if path in compared:
                held_by, held_blob = compared[path]
                pairs.append((path, held_blob, new, held_by, commit))
            if status == "R":
                current.pop(source, None)
            if status == "D":
                if path in current:
                    gone[path] = current.pop(path)
            else:
                current[path] = (commit, new)
                gone.pop(path, None)
    added = {path: commit for path, (commit, _blob) in current.items() if path not in compared_once}
    pairs += _merged_originals(repo, dirs, current, added, sets)
    notes: list[str] = []
    # What is graded first: tapes still at HEAD, newest change first. A history padded with rewrites of a
    # tape deleted later (1,200 one-MB versions took 150 s) then costs its cap, never the tapes that count.
    # (place in the history, pair), in the order they are read
    ranked = sorted(enumerate(pairs), key=lambda item: (item[1][0] not in current, -item[0]))
    if len(ranked) > _MAX_PAIRS:
        notes.append(f"tape history: {len(ranked) - _MAX_PAIRS} changed tape versions not compared (cap)")
        ranked = ranked[:_MAX_PAIRS]
    # commit -> (place in the history, what it did to the tape) for each tape version it changed
    found: dict[str, list[tuple[int, _Change]]] = defaultdict(list)
    blobs = [sha for _, (_, old, new, _, _) in ranked for sha in (old, new)]
    read = done = 0
    with contextlib.closing(_cat(repo, blobs)) as contents:
        for n, (path, _old, _new, before, after) in ranked:
            if read > _MAX_HISTORY_BYTES:
                notes.append(
                    f"tape history: {len(ranked) - done} older changed tape versions not compared (over "
                    f"{_MAX_HISTORY_BYTES // 2**20} MB read; tapes at HEAD, newest change first, were)"
                )
                break
            old_data, new_data = next(contents, None), next(contents, None)
            done += 1
            if old_data is None or new_data is None:
                found[after].append((n, _Change(edits=[], rerecorded=True)))  # never evidence
                continue
            read += len(old_data) + len(new_data)
            change = _compare(path, old_data, new_data, before[:_SHORT], after[:_SHORT])
            found[after].append((n, change))
    edits: list[tuple[int, TapeEdit]] = []
    for commit, commit_changes in found.items():
        # A re-recording asks every question again: every tape of the set gets new answers (ids, bodies).
        # A commit that touched every tape but left some answers as they were (only `recorded_at` or other
        # metadata restamped) re-recorded nothing: its changed answers are edits.
        if sets.get(commit) and all(change.rerecorded for _, change in commit_changes):
            continue
        edits += [(n, edit) for n, change in commit_changes for edit in change.edits]
    return TapeHistory([edit for _, edit in sorted(edits, key=lambda e: e[0])], notes)


def _merged_originals(
    repo: Path,
    dirs: Sequence[str],
    current: dict[str, tuple[str, str]],
    added: dict[str, str],
    sets: dict[str, bool],
) -> list[tuple[str, str, str, str, str]]:
    """Versions of HEAD's tapes that only another parent of a merge holds (red team 4, F4).

    The first-parent line can start with an orphan commit holding an edited tape while a merge brings the
    original recording in as its second parent: on the first-parent line the edited tape is then simply
    the tape's first version. For each tape the first-parent line only ever added, each merge's other
    parents are asked for their version: one whose commit does not descend from the commit that added
    HEAD's version is an earlier recording of it, compared like a modification (same request, another
    answer: an edit). A branch that forked after that commit and changed the tape is not (it is newer).
    """
    if not added:
        return []
    # No pathspec here: git would drop a merge whose tapes equal its first parent's, the very case looked for.
    merges = _git(
        repo, "log", "--first-parent", "--merges", f"--max-count={_MAX_MERGES}", "--format=%H %P", "HEAD"
    )
    out: list[tuple[str, str, str, str, str]] = []
    for line in merges.decode("ascii", "replace").splitlines():
        merge, _first, *others = line.split()
        changed: list[tuple[str, str, str, str, str]] = []
        for other in others:
            # Only the tapes whose version differs between that parent and the merge: one call per merge.
            raw = _git(repo, "diff", "-r", "--no-renames", *_RAW_DIFF, other, merge, "--", *dirs)
            for path, (status, theirs, _ours, _source) in _diff(
                raw.decode("utf-8", "surrogateescape")
            ).items():
                if status != "M" or path not in added:  # added: tapes of `current`
                    continue
                commit = added[path]
                try:
                    held = _git(repo, "log", "-1", "--format=%H", other, "--", path).decode().strip()
                except _GitError:
                    continue
                try:  # newer than HEAD's version when it descends from the commit that added it
                    _git(repo, "merge-base", "--is-ancestor", commit, held)
                    continue
                except _GitError:
                    pass
                changed.append((path, theirs, current[path][1], held, commit))
        if changed:
            # One commit's versions against another line's: the whole set different is a re-recording.
            sets[changed[0][4]] = sets.get(changed[0][4], False) or len(changed) >= len(added) > 1
            out += changed
    return out


def _diff(raw: str) -> dict[str, tuple[str, str, str, str]]:
    """``git diff --raw`` lines as `_commits` reads them."""
    return next((changes for _, changes in _commits("@diff\n" + raw)), {})


def _commits(log: str) -> Iterator[tuple[str, dict[str, tuple[str, str, str, str]]]]:
    """(commit, {path: (status letter, old blob, new blob, path before a move)}) from
    ``git log --raw --format=@%H``; a move (``R``) is listed under its new path."""
    commit = ""
    changes: dict[str, tuple[str, str, str, str]] = {}
    for line in log.splitlines():
        if line.startswith("@"):
            if commit:
                yield commit, changes
            commit, changes = line[1:], {}
        elif line.startswith(":") and "\t" in line:
            meta, _, path = line.partition("\t")
            fields = meta.split()
            if len(fields) >= 5:
                status = fields[4][:1]
                source, _, moved_to = path.partition("\t")
                if status in ("R", "C") and moved_to:
                    changes[moved_to] = ("R" if status == "R" else "A", fields[2], fields[3], source)
                else:
                    changes[path] = (status, fields[2], fields[3], path)
    if commit:
        yield commit, changes


@dataclass
class _Change:
    """What one commit did to one tape: the hand edits in it, and whether it looks re-recorded."""

    edits: list[TapeEdit]
    rerecorded: bool  # a new key, a request changed or added, or a recorded answer changed


def _compare(path: str, old_data: bytes, new_data: bytes, before: str, after: str) -> _Change:
    new_text = new_data.decode("utf-8", "replace")
    old, new = _parse(path, old_data.decode("utf-8", "replace")), _parse(path, new_text)
    new.text = new_text
    if "invalid" in (old.format, new.format):
        return _Change(edits=[], rerecorded=True)
    if old.format == "kit" and new.format == "kit" and old.key != new.key:
        return _Change(edits=[], rerecorded=True)  # a new key is a new recording
    out: list[TapeEdit] = []
    rerecorded = False
    olds: dict[str, list[Interaction]] = defaultdict(list)
    for inter in old.interactions:
        olds[_request(inter)].append(inter)
    seen: dict[str, int] = defaultdict(int)
    for inter in new.interactions:
        sig = _request(inter)
        index = seen[sig]
        seen[sig] += 1
        if index >= len(olds[sig]):
            rerecorded = True
            continue  # an interaction added: a recording, not an edit
        if _response(olds[sig][index]) != _response(inter):
            rerecorded = True
            out.append(
                TapeEdit(
                    path=path,
                    line=_response_line(new, inter),
                    before=before,
                    after=after,
                    request=f"{inter.method or '?'} {inter.path or inter.url or '?'}",
                )
            )
    return _Change(edits=out, rerecorded=rerecorded)


def _request(inter: Interaction) -> str:
    return repr((inter.method, inter.url or inter.path, _canon(inter.request_body)))


def _response(inter: Interaction) -> str:
    return repr((inter.status, _canon(inter.response_body), inter.response_text))


def _canon(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _response_line(tape: Tape, inter: Interaction) -> int:
    start = inter.line or 1
    text = tape.text or ""
    for number, line in enumerate(text.splitlines(), 1):
        if number >= start and _RESPONSE_KEY.match(line):
            return number
    return start


# ----------------------------------------------------------------------------------------------- git


class _GitError(RuntimeError):
    pass


# The one place this module runs git, through grader/gitsafe.py: the checkout's own config is the
# candidate's, and nothing in it may run (hooks, fsmonitor, gpg.program via log.showSignature, textconv or
# external diff, credential helpers); no config outside it is read either.
_ENV = {"GIT_LITERAL_PATHSPECS": "1"}


def _git(repo: Path, *args: str, stdin: Any = None, popen: bool = False) -> Any:
    argv = gitsafe.argv("--no-replace-objects", "-C", str(repo), *args)
    env = gitsafe.env(extra=_ENV)
    if popen:
        return subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, env=env)
    proc = subprocess.run(argv, capture_output=True, check=False, env=env, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise _GitError(proc.stderr.decode("utf-8", "replace").strip()[:200])
    return proc.stdout


def _cat(repo: Path, shas: Sequence[str]) -> Generator[bytes | None, None, None]:
    """Each blob's content in order (None when missing or over the parse cap), one ``cat-file`` stream."""
    if not shas:
        return
    with tempfile.TemporaryFile() as request:
        request.write("".join(f"{sha}\n" for sha in shas).encode())
        request.seek(0)
        proc = _git(repo, "cat-file", "--batch", stdin=request, popen=True)
        out = proc.stdout
        try:
            for _ in shas:
                header = out.readline().split()
                if len(header) != 3:
                    yield None
                    continue
                size = int(header[2])
                if size > MAX_PARSE_BYTES:
                    _skip(out, size + 1)
                    yield None
                    continue
                data = out.read(size)
                out.read(1)
                yield data
        finally:
            proc.kill()
            out.close()
            proc.wait()


def _skip(stream: Any, size: int) -> None:
    while size > 0:
        chunk = stream.read(min(size, 1 << 20))
        if not chunk:
            return
        size -= len(chunk)
