"""Tape history as evidence: a recorded response changed in a later commit while its request did not.

A tape is a recording; a candidate who re-records changes the whole set at once (every answer is asked again).
A commit that changes the *answer* of one tape while its request (and, for the kit's tapes, its key) stays
as it was is an edit by hand: a failing label made to pass. Each such change is a `TapeEdit` naming the
commit that had the recorded answer, the commit that changed it, and the tape's ``file:line``.

Not an edit: a tape deleted, a tape whose request changed (a new recording), and a commit that re-records
the whole set: it gives every tape the set held before it a new answer (a new key, a changed request or a
changed response). Restamping every tape's ``recorded_at`` (or other metadata) in the commit that edits one
answer is not a re-recording: the other answers stayed as they were. Nor is re-keying (red team 6, H8): a
commit that gives tapes new keys or stored requests (a new normalization rule) but keeps their answers byte
for byte asked nothing again, so an answer that changed with the same request change in that commit is an
edit; tapes whose requests kept none of their old interactions are paired by position. A tape moved in a
commit is compared with what it was, and a tape deleted and later put back at the same path with the version
deleted, so neither launders an edit. Headers are not compared (a re-recording changes ``date``), only
status and body.

History is read from the first-parent line of HEAD (what is graded), merges compared with their first
parent. An earlier version that line does not hold is looked for in merges' other parents (red team 4, F4)
and in commits other refs reach (tags, unmerged branches: F4b, an orphan HEAD with the original tagged).
Git runs through one hardened call (`_git`): no system or global config, no hooks, no fsmonitor, no
signatures, no textconv or external diff, no replace objects, literal pathspecs.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import re
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from grader import gitsafe
from grader.perturb import answer_objects
from grader.tapes import DISCOVERY_DIRS, MAX_PARSE_BYTES, TAPE_SUFFIXES, Interaction, Tape, _parse

__all__ = ["TapeEdit", "TapeHistory", "tape_edits"]

_RESPONSE_KEY = re.compile(r'^\s*"?response"?\s*:')  # where the answer starts, JSON or YAML
_SHORT = 7  # commit ids as the history scan shows them
_RAW_DIFF = ("--raw", "--no-abbrev", "--no-textconv", "--no-ext-diff")  # `git diff` takes no signature flag
_MAX_MERGES = 500  # first-parent merges whose other parents are asked for older tape versions (newest first)
_MAX_PAIRS = 20_000  # changed tape versions compared per grade; more is noted, never a crash
_MAX_HISTORY_BYTES = 64 * 2**20  # tape versions read per grade (old + new); more is noted
_MAX_REFS = 10_000  # refs (tags, branches) whose history outside HEAD's is asked for older tape versions
_MAX_REF_COMMITS = 2_000  # commits outside HEAD's history listed (newest first)
_MAX_REF_DIFFS = 200  # of those, commits whose tapes are compared with HEAD's (one `git diff` each)


@dataclass(frozen=True)
class TapeEdit:
    """One tape whose recorded response changed in ``after`` while its request stayed as in ``before``."""

    path: str  # repo-relative tape path
    line: int  # line of the changed interaction's response in the ``after`` version (1 when unknown)
    before: str  # short sha of the commit whose version held the original answer
    after: str  # short sha of the commit that changed the answer
    request: str  # e.g. "POST /v1/chat/completions"
    # The ref that holds ``before`` when HEAD's history does not (e.g. "tag rehearsal"), else "".
    ref: str = ""
    # The request fields that changed with it when the commit re-keyed the set (red team 6, H8), else "".
    rekeyed: str = ""
    # Whether the answer objects it holds (label, flag: grader/perturb.py) changed, not only an id or a
    # timestamp; True when neither version's answer could be read.
    answer_changed: bool = True

    @property
    def location(self) -> str:
        return f"{self.after}:{self.path}:{self.line}"

    @property
    def message(self) -> str:
        where = f" ({self.ref}, not in HEAD's history)" if self.ref else ""
        if self.rekeyed:
            return (
                f"{self.path}: the recorded response of {self.request} was changed in {self.after}, which "
                f"re-keyed tapes (request fields {self.rekeyed} changed) keeping their answers byte for "
                f"byte: a re-key, not a re-recording, of the answer held since {self.before}{where}"
            )
        return (
            f"{self.path}: the recorded response of {self.request} was changed in {self.after}, "
            f"its request unchanged since {self.before}{where} (not a re-recording of the whole set)"
        )


class _Pair(NamedTuple):
    """Two versions of one tape to compare, and the group the whole-set (re-recording) rule reads."""

    path: str  # the tape at HEAD (or where the history had it)
    old: str  # blob holding the earlier answer
    new: str  # blob of the later version
    before: str  # commit that held ``old``
    after: str  # commit that wrote ``new``
    group: str  # versions judged together: a re-recording changes every answer of its group
    ref: str = ""  # the ref holding ``before`` when HEAD's history does not
    copy: bool = False  # ``new`` is a copy of ``old``'s tape in another folder, which is kept


@dataclass
class TapeHistory:
    """What `tape_edits` found: the edits, and notes on what it did not compare."""

    edits: list[TapeEdit]
    notes: list[str]


def tape_edits(repo: Path, cassette_dir: Path | str | None) -> TapeHistory:
    """Every hand edit of a recorded response in the history of ``repo``'s tapes (oldest first)."""
    dirs = [Path(cassette_dir).as_posix()] if cassette_dir is not None else list(DISCOVERY_DIRS)
    try:
        dirs += _moved_from(repo, dirs)
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
    # Every tape version a first-parent commit modified: whether the commit re-recorded the whole set is
    # only known once the answers are read.
    pairs: list[_Pair] = []
    sets: dict[str, bool] = {}  # group -> it gave every tape of its set a new version
    current: dict[str, tuple[str, str]] = {}  # tape path -> (commit that last wrote it, its blob)
    # Deleted tapes: a tape deleted in one commit and put back (same path) in a later one is compared with
    # the version that was deleted, like a modification: deleting and re-adding does not launder an edit.
    gone: dict[str, tuple[str, str]] = {}
    compared_once: set[str] = set()  # tapes the first-parent line ever gave a second version
    seen: set[tuple[str, str]] = set()  # (path, blob) of every version the first-parent line held
    for commit, changes in _commits(log.decode("utf-8", "surrogateescape")):
        tapes = {p: c for p, c in changes.items() if p.lower().endswith(TAPE_SUFFIXES)}
        seen.update((p, blob) for p, (_, old, new, _) in tapes.items() for blob in (old, new))
        # (path, the version it is compared with: (commit that held it, blob)) for every tape this commit
        # gives a new version of one the history already had: modified, moved, or put back after deletion.
        compared: dict[str, tuple[str, str]] = {}
        copies = _copies(tapes, current)
        tapes.update(copies)
        for path, (status, _old, _new, source) in tapes.items():
            if status == "M" and path in current:
                compared[path] = current[path]
            elif status == "R" and source in current:
                compared[path] = current[source]
            elif status == "A" and path in gone:
                compared[path] = gone[path]
            elif status == "A" and source != path and source in current:
                # Copied from a tape the history holds (red team 28, F1: `cassettes/` copied to `tapes/`, one
                # answer edited in the copy, the manifest pointed at the copy): compared with its original.
                compared[path] = current[source]
        moved = {source for status, _, _, source in tapes.values() if status == "R"}
        copied = {
            source for path, (status, _, _, source) in tapes.items() if status == "A" and source != path
        }
        existing = {p for p in current if tapes.get(p, ("",))[0] != "D" and p not in moved}
        # A set recorded anew into another folder covers the tapes it was copied from.
        sets[commit] = bool(compared) and set(compared) | copied >= existing
        compared_once.update(compared)
        for path, (status, _old, new, source) in sorted(tapes.items()):
            if path in compared:
                held_by, held_blob = compared[path]
                pairs.append(_Pair(path, held_blob, new, held_by, commit, commit, copy=path in copies))
            if status == "R":
                held = current.pop(source, None)
            else:  # a copy as it was: its answer, too, is the one the original's commit wrote
                held = current.get(source) if status == "A" and source != path else None
            if status == "D":
                if path in current:
                    gone[path] = current.pop(path)
            elif held is not None and held[1] == new:
                current[path] = held  # moved (or copied) as it was: the answer is the one its commit wrote
                gone.pop(path, None)
            else:
                current[path] = (commit, new)
                gone.pop(path, None)
    added = {path: commit for path, (commit, _blob) in current.items() if path not in compared_once}
    pairs += _merged_originals(repo, dirs, current, added, sets)
    notes: list[str] = []
    pairs += _other_refs(repo, [*dict.fromkeys([*dirs, *DISCOVERY_DIRS])], current, seen, pairs, sets, notes)
    # What is graded first: tapes still at HEAD, newest change first. A history padded with rewrites of a
    # tape deleted later (1,200 one-MB versions took 150 s) then costs its cap, never the tapes that count.
    # (place in the history, pair), in the order they are read
    ranked = sorted(enumerate(pairs), key=lambda item: (item[1].path not in current, -item[0]))
    if len(ranked) > _MAX_PAIRS:
        notes.append(f"tape history: {len(ranked) - _MAX_PAIRS} changed tape versions not compared (cap)")
        ranked = ranked[:_MAX_PAIRS]
    # group -> (place in the history, what the later version did to the tape) for each pair of the group
    found: dict[str, list[tuple[int, _Change]]] = defaultdict(list)
    blobs = [sha for _, pair in ranked for sha in (pair.old, pair.new)]
    read = done = 0
    with contextlib.closing(_cat(repo, blobs)) as contents:
        for n, pair in ranked:
            if read > _MAX_HISTORY_BYTES:
                notes.append(
                    f"tape history: {len(ranked) - done} older changed tape versions not compared (over "
                    f"{_MAX_HISTORY_BYTES // 2**20} MB read; tapes at HEAD, newest change first, were)"
                )
                break
            old_data, new_data = next(contents, None), next(contents, None)
            done += 1
            if old_data is None or new_data is None:
                found[pair.group].append((n, _Change(edits=[], rerecorded=True)))  # never evidence
                continue
            read += len(old_data) + len(new_data)
            change = _compare(pair, old_data, new_data)
            found[pair.group].append((n, change))
    edits: list[tuple[int, TapeEdit]] = []
    for group, group_changes in found.items():
        # A commit that gave tapes new keys or stored requests but kept their answers byte for byte re-keyed
        # them (a new normalization rule) without asking anything again: an answer that changed with the
        # same request change in that commit was edited, not re-recorded (red team 6, H8).
        rekeyed = {delta for _, change in group_changes for delta in change.rekeyed}
        edits += [
            (n, edit) for n, change in group_changes for edit, delta in change.rekey_edits if delta in rekeyed
        ]
        # A re-recording asks every question again: every tape of the set gets new answers (ids, bodies).
        # A commit that touched every tape but left some answers as they were (only `recorded_at` or other
        # metadata restamped) re-recorded nothing: its changed answers are edits.
        if sets.get(group) and all(change.rerecorded for _, change in group_changes):
            continue
        edits += [(n, edit) for n, change in group_changes for edit in change.edits]
    return TapeHistory([edit for _, edit in sorted(edits, key=lambda e: e[0])], notes)


def _moved_from(repo: Path, dirs: Sequence[str]) -> list[str]:
    """The folders tapes now in ``dirs`` were moved or copied from by a first-parent commit, through any
    chain of them (red team 27, F2: `git mv cassettes tapes` and a hand edit in the same commit; read with
    the new folder alone, every tape looked new there and the edit was compared with nothing; 28, F1: the
    same with a copy, the original kept, known by its file name in another folder). Found by a walk of the
    whole tree, since rename detection pairs only the paths its pathspec holds."""
    log = _git(
        repo,
        "log",
        "--reverse",  # oldest first: a copy's original was held before it
        "--first-parent",
        "--diff-merges=first-parent",
        *gitsafe.RAW_LOG,
        "--find-renames",
        "--format=@%H",
        "HEAD",
    )
    moves: list[tuple[str, str]] = []
    held_paths: dict[str, set[str]] = defaultdict(set)  # file name -> tape paths the line held so far
    for _, changes in _commits(log.decode("utf-8", "surrogateescape")):
        tapes = {p: c for p, c in changes.items() if p.lower().endswith(TAPE_SUFFIXES)}
        for path, (status, _old, _new, source) in tapes.items():
            name = posixpath.basename(path)
            if status == "R":
                moves.append((path, source))
            elif status == "A" and len(held_paths[name]) <= _MAX_NAMESAKES:
                # A copy: the same file name in another folder the line already held (git's own copy
                # detection over the whole tree cost 23 s on a padded history). A name held in more places
                # than a tape set has tapes is some other file's (`package.json`), and pairing them all
                # would grow as their square.
                moves += [(path, other) for other in held_paths[name] if other != path]
        for path, (status, _old, _new, source) in tapes.items():
            if status == "R":
                held_paths[posixpath.basename(source)].discard(source)
            if status == "D":
                held_paths[posixpath.basename(path)].discard(path)
            else:
                held_paths[posixpath.basename(path)].add(path)
    found: list[str] = []
    held = list(dirs)
    while True:
        more = {
            posixpath.dirname(source) or "."
            for path, source in moves
            if any(_below(path, d) for d in held) and not any(_below(source, d) for d in held)
        }
        if not more:
            return found
        found += sorted(more)
        held += sorted(more)


_MAX_NAMESAKES = 64  # places one file name may be held in and still be followed as a copied tape


def _copies(
    tapes: dict[str, tuple[str, str, str, str]], current: dict[str, tuple[str, str]]
) -> dict[str, tuple[str, str, str, str]]:
    """The tapes a commit added that copy one the history holds in another folder under the same file name
    (kept there: not a move), as ``{path: ("A", old, new, source)}``; the source holding the same bytes
    first, else the first by path. A name held in more than `_MAX_NAMESAKES` places is not followed."""
    gone = {p for p, (status, *_rest) in tapes.items() if status in ("D", "R")}
    added = [(path, change) for path, change in tapes.items() if change[0] == "A"]
    if not added:
        return {}
    by_name: dict[str, list[str]] = defaultdict(list)
    for p in current:
        if p not in gone:
            by_name[posixpath.basename(p)].append(p)
    found: dict[str, tuple[str, str, str, str]] = {}
    for path, (_status, old, new, _source) in added:
        sources = [p for p in by_name.get(posixpath.basename(path), ()) if p != path]
        if 0 < len(sources) <= _MAX_NAMESAKES:
            source = min(sources, key=lambda p: (current[p][1] != new, p))
            found[path] = ("A", old, new, source)
    return found


def _below(path: str, folder: str) -> bool:
    return folder in ("", ".") or path.startswith(folder.rstrip("/") + "/")


def _merged_originals(
    repo: Path,
    dirs: Sequence[str],
    current: dict[str, tuple[str, str]],
    added: dict[str, str],
    sets: dict[str, bool],
) -> list[_Pair]:
    """Versions of HEAD's tapes that only another parent of a merge holds (red team 4, F4).

    The first-parent line can start with an orphan commit holding an edited tape while a merge brings the
    original recording in as its second parent: on the first-parent line the edited tape is then simply
    the tape's first version. For each tape the first-parent line only ever added, each merge's other
    parents are asked for their version: one whose commit does not descend from the commit that added
    HEAD's version is an earlier recording of it, compared like a modification (same request, another
    answer: an edit). A branch that forked after that commit and changed the tape is not (it is newer).
    The whole-set rule is judged per merge and per adding commit: the tapes one commit added, all of them
    different from the other line's (more than one), are a re-recording of what that line held.
    """
    if not added:
        return []
    # No pathspec here: git would drop a merge whose tapes equal its first parent's, the very case looked for.
    merges = _git(
        repo, "log", "--first-parent", "--merges", f"--max-count={_MAX_MERGES}", "--format=%H %P", "HEAD"
    )
    per_commit: dict[str, int] = defaultdict(int)  # adding commit -> tapes of HEAD it added
    for commit in added.values():
        per_commit[commit] += 1
    out: list[_Pair] = []
    for line in merges.decode("ascii", "replace").splitlines():
        merge, _first, *others = line.split()
        changed: dict[str, list[_Pair]] = defaultdict(list)  # adding commit -> its tapes the merge changed
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
                if _is_ancestor(repo, commit, held):  # newer than HEAD's version: it descends from it
                    continue
                group = f"{merge} {commit}"
                changed[commit].append(_Pair(path, theirs, current[path][1], held, commit, group))
        for commit, versions in changed.items():
            # One commit's versions against another line's: all it added different is a re-recording.
            sets[versions[0].group] = len(versions) >= per_commit[commit] > 1
            out += versions
    return out


def _other_refs(
    repo: Path,
    dirs: Sequence[str],
    current: dict[str, tuple[str, str]],
    seen: set[tuple[str, str]],
    pairs: Sequence[_Pair],
    sets: dict[str, bool],
    notes: list[str],
) -> list[_Pair]:
    """Versions of HEAD's tapes that only a commit outside HEAD's history holds (red team 4, F4b).

    HEAD can be an orphan commit holding an edited tape while the original recording stays in the
    submitted repository under another ref (a tag, a branch never merged): HEAD's history then holds no
    earlier version. Every commit that another ref reaches and HEAD does not, and that wrote a tape version
    HEAD's history never held, has its tapes compared with HEAD's (``git diff``, moves followed): a tape
    HEAD holds with another answer to the same request is an edit naming that commit and the ref, unless
    its line forked from a commit that already held HEAD's version (a branch that changed the tape later:
    its version is the newer one) or every tape the two share differs (two recordings of the set, more
    than one tape).
    Refs, commits listed and commits compared are capped; a cap reached is a note.
    """
    if not current:
        return []
    listing = _git(
        repo,
        "for-each-ref",
        f"--count={_MAX_REFS + 1}",
        "--format=%(objecttype) %(*objecttype) %(refname)",
    ).decode("utf-8", "surrogateescape")
    revs: list[str] = []
    for line in listing.splitlines()[:_MAX_REFS]:
        kind, peeled, name = [*line.split(" ", 2), "", ""][:3]
        if kind == "commit" or (kind == "tag" and peeled == "commit"):
            revs.append(name)
        elif kind == "tag" and peeled == "tag" and _is_commit(repo, name):  # a tag of a tag
            revs.append(f"{name}^{{commit}}")
    if len(listing.splitlines()) > _MAX_REFS:
        notes.append(f"tape history: only the first {_MAX_REFS} refs were asked for other versions (cap)")
    if not revs:
        return []
    with tempfile.TemporaryFile() as request:
        request.write("".join(f"{rev}\n" for rev in [*revs, "^HEAD"]).encode("utf-8", "surrogateescape"))
        request.seek(0)
        try:
            log = _git(
                repo,
                "log",
                "--stdin",
                "--full-history",  # no merge's side line dropped for being TREESAME on the tapes
                "--no-renames",
                *gitsafe.RAW_LOG,
                f"--max-count={_MAX_REF_COMMITS + 1}",
                "--format=@%H %S",
                "--",
                *dirs,
                stdin=request,
            ).decode("utf-8", "surrogateescape")
        except _GitError as exc:
            notes.append(f"tape history: other refs not read (git: {exc})")
            return []
    listed = list(_commits(log))
    if len(listed) > _MAX_REF_COMMITS:
        notes.append(
            f"tape history: only the newest {_MAX_REF_COMMITS} commits outside HEAD's history that change "
            "tapes were read (cap)"
        )
        listed = listed[:_MAX_REF_COMMITS]
    # Commits that wrote a tape version HEAD's history never held, oldest first (the recording before what
    # was built on it): only they can hold an answer HEAD's history does not.
    candidates = [
        (line.partition(" ")[0], line.partition(" ")[2])
        for line, changes in reversed(listed)
        if any(
            status != "D" and path.lower().endswith(TAPE_SUFFIXES) and (path, new) not in seen
            for path, (status, _old, new, _source) in changes.items()
        )
    ]
    if len(candidates) > _MAX_REF_DIFFS:
        notes.append(
            f"tape history: {len(candidates) - _MAX_REF_DIFFS} commits outside HEAD's history not compared "
            f"with HEAD's tapes (cap; the {_MAX_REF_DIFFS} oldest were)"
        )
        candidates = candidates[:_MAX_REF_DIFFS]
    known = {(p.path, p.old, p.new) for p in pairs}
    found: list[_Pair] = []
    for commit, ref in candidates:
        raw = _git(repo, "diff", "-r", "--find-renames", *_RAW_DIFF, commit, "HEAD", "--", *dirs)
        changes = _diff(raw.decode("utf-8", "surrogateescape"))
        differ = {p: c for p, c in changes.items() if p in current and c[0] in ("M", "R")}
        same = [p for p in current if p not in changes]  # tapes HEAD holds exactly as this commit does
        group = f"ref {commit}"
        sets[group] = not same and len(differ) > 1
        for path, (_status, old, new, source) in sorted(differ.items()):
            if (source, old) in seen or (path, old, new) in known:
                continue  # a version HEAD's history holds (compared there), or one already compared
            known.add((path, old, new))
            found.append(_Pair(path, old, new, commit, current[path][0], group, _ref_name(ref)))
    # A line that forked from a commit already holding HEAD's version (a branch that changed the tape after
    # it was recorded, merged or not) holds a newer version, not the original.
    by_commit: dict[str, list[_Pair]] = defaultdict(list)
    for pair in found:
        by_commit[pair.before].append(pair)
    out: list[_Pair] = []
    for commit, versions in by_commit.items():
        held = _held_at_fork(repo, commit, [pair.path for pair in versions])
        out += [pair for pair in versions if (pair.path, pair.new) not in held]
    return out


def _held_at_fork(repo: Path, commit: str, paths: Sequence[str]) -> set[tuple[str, str]]:
    """(path, blob) of ``paths`` in every commit where ``commit``'s line forked from HEAD's (none: orphan)."""
    try:
        bases = _git(repo, "merge-base", "--all", commit, "HEAD").decode("ascii", "replace").split()
    except _GitError:
        return set()  # no common history
    held: set[tuple[str, str]] = set()
    for base in bases:
        # Paths quoted as in the raw diffs they are compared with (no -z).
        listing = _git(repo, "ls-tree", "-r", base, "--", *paths).decode("utf-8", "surrogateescape")
        for record in listing.splitlines():
            meta, _, path = record.partition("\t")
            fields = meta.split()
            if len(fields) == 3:
                held.add((path, fields[2]))
    return held


def _ref_name(ref: str) -> str:
    """``refs/tags/rehearsal`` -> ``tag rehearsal``; a branch (local or remote-tracking) likewise."""
    ref = ref.removesuffix("^{commit}")
    for prefix, kind in (("refs/tags/", "tag"), ("refs/heads/", "branch"), ("refs/remotes/", "branch")):
        if ref.startswith(prefix):
            return f"{kind} {ref[len(prefix) :]}"
    return f"ref {ref}"


def _is_ancestor(repo: Path, ancestor: str, commit: str) -> bool:
    try:
        _git(repo, "merge-base", "--is-ancestor", ancestor, commit)
    except _GitError:
        return False
    return True


def _is_commit(repo: Path, rev: str) -> bool:
    try:
        _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except _GitError:
        return False
    return True


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
    # Red team 6, H8: the request changes (fields changed, as a sorted tuple) of interactions that kept their
    # answer byte for byte under a new key or request: re-keyed, not asked again.
    rekeyed: set[tuple[str, ...]] = field(default_factory=set)
    # Answers that changed with a new key or request: edits if the commit re-keyed others the same way.
    rekey_edits: list[tuple[TapeEdit, tuple[str, ...]]] = field(default_factory=list)


def _compare(pair: _Pair, old_data: bytes, new_data: bytes) -> _Change:
    path = pair.path
    new_text = new_data.decode("utf-8", "replace")
    old, new = _parse(path, old_data.decode("utf-8", "replace")), _parse(path, new_text)
    new.text = new_text
    if "invalid" in (old.format, new.format):
        return _Change(edits=[], rerecorded=True)
    if old.format == "kit" and new.format == "kit" and old.key != new.key:
        # A new key is a new recording, unless the answers stayed as they were (a re-key).
        return _rekey(pair, old, new, _Change(edits=[], rerecorded=True))
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
            if pair.copy and _frame(olds[sig][index]) != _frame(inter):
                continue  # a tape of its own recorded later (new ids, times): a copy keeps them
            out.append(_edit(pair, new, inter, before=olds[sig][index]))
    change = _Change(edits=out, rerecorded=rerecorded)
    if not any(olds.get(sig) for sig in seen):  # no interaction kept its request: paired by position
        return _rekey(pair, old, new, change)
    return change


def _edit(
    pair: _Pair, new: Tape, inter: Interaction, rekeyed: str = "", *, before: Interaction | None = None
) -> TapeEdit:
    """The finding for ``inter``'s answer, changed in ``pair``'s later commit (``new``: that version;
    ``before``: the interaction as it was)."""
    return TapeEdit(
        path=pair.path,
        line=_response_line(new, inter),
        before=pair.before[:_SHORT],
        after=pair.after[:_SHORT],
        request=f"{inter.method or '?'} {inter.path or inter.url or '?'}",
        ref=pair.ref,
        rekeyed=rekeyed,
        answer_changed=before is None or _answers_differ(before, inter),
    )


def _answers_differ(before: Interaction, after: Interaction) -> bool:
    was = [answer for _, answer in answer_objects(before.response_body)]
    now = [answer for _, answer in answer_objects(after.response_body)]
    return was != now or not (was or now)


def _rekey(pair: _Pair, old: Tape, new: Tape, change: _Change) -> _Change:
    """``change`` with the interactions paired by position when none kept its request (same count): one
    whose answer stayed byte for byte was re-keyed; one whose answer changed is an edit if its commit
    re-keyed others with the same request change (decided per commit by `tape_edits`)."""
    if len(old.interactions) != len(new.interactions):
        return change
    for before, after in zip(old.interactions, new.interactions, strict=True):
        delta = _delta(before, after)
        if _response(before) == _response(after):
            change.rekeyed.add(delta)
            continue
        edit = _edit(pair, new, after, rekeyed=", ".join(delta) or "none", before=before)
        change.rekey_edits.append((edit, delta))
    change.rerecorded = bool(change.rekey_edits)  # every answer kept: a re-key, not a re-recording
    return change


def _delta(before: Interaction, after: Interaction) -> tuple[str, ...]:
    """The request fields two interactions differ in: the body's top-level keys, the method and URL."""
    fields = {name for name in ("method", "url", "path") if getattr(before, name) != getattr(after, name)}
    old, new = before.request_body, after.request_body
    if isinstance(old, dict) and isinstance(new, dict):
        fields |= {k for k in old.keys() | new.keys() if _canon(old.get(k)) != _canon(new.get(k))}
    elif _canon(old) != _canon(new):
        fields.add("body")
    return tuple(sorted(str(name) for name in fields))


def _request(inter: Interaction) -> str:
    return repr((inter.method, inter.url or inter.path, _canon(inter.request_body)))


def _frame(inter: Interaction) -> str:
    """The response less its answers: what a hand edit of a copied tape keeps and a recording of the same
    request made later does not (the completion's id, its creation time, usage)."""
    body = inter.response_body
    if isinstance(body, str) and body.lstrip().startswith(("{", "[")):
        with contextlib.suppress(ValueError):
            body = json.loads(body)  # a vcrpy body is the response's text: its id is inside
    answers = {text for text, _ in answer_objects(body)}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return "<answer>" if isinstance(value, str) and value in answers else value

    return repr((inter.status, _canon(strip(body))))


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
    stdin = subprocess.DEVNULL if stdin is None else stdin
    proc = subprocess.run(argv, capture_output=True, check=False, env=env, stdin=stdin)
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
