"""Read a submission's tape chain (the kit's ``CHAIN.log``) without running its code.

The chain is JSON lines but named ``.log``: tape readers that take ``*.jsonl`` files for tapes (ours do)
must not read it as one, nor withhold it with the tapes.

The template appends one line per tape written or pruned to ``<cassette_dir>/CHAIN.log``: compact JSON with
``op`` (record | rerecord | prune), ``tape`` (the key), ``sha256`` (of the tape's canonical JSON), ``at`` and
``prev`` (sha256 of the previous line's text; 64 zeros on the first line). This module walks that chain and
holds every kit tape in the folder to the last entry that names it, exactly as the template's own
``python -m <pkg>.cassette verify`` does, so the grader's verdict never depends on the submission's verifier.

A chain is evidence when present and never a requirement: without one, ``read_chain`` returns None. A chain
catches an edit made by someone who did not re-chain; a re-chained edit shows in the history instead:
``chain_rewrites`` lists the commits whose chain is not the previous commit's chain with lines appended (a
rewritten chain, or one started over, e.g. after deleting the folder and recording again).
"""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath

from grader import gitsafe
from grader.tapes import Tape

__all__ = ["CHAIN_FILE", "ChainProblem", "ChainVerdict", "chain_rewrites", "read_chain", "tape_digest"]

CHAIN_FILE = "CHAIN.log"
_GENESIS = "0" * 64
_OPS = ("record", "rerecord", "prune")
# A chain line per tape write; far more than any take-home records.
_MAX_BYTES = 16 * 1024 * 1024
_MAX_COMMITS = 500


@dataclass(frozen=True)
class ChainProblem:
    """One thing wrong, where (``file:line``) and whether it proves an edit (``tampered``)."""

    kind: str  # broken-link | not-an-entry | edited-tape | unlisted-tape | missing-tape
    message: str
    location: str
    tampered: bool


@dataclass
class ChainVerdict:
    path: str  # repo-relative chain file
    entries: int = 0
    head: str = ""
    problems: list[ChainProblem] = field(default_factory=list)
    error: str | None = None  # the chain could not be read at all (symlink, too large, not UTF-8)

    @property
    def tampered(self) -> int:
        return sum(p.tampered for p in self.problems)

    def count(self, kind: str) -> int:
        return sum(p.kind == kind for p in self.problems)


def tape_digest(tape: object) -> str:
    """sha256 of a tape's canonical JSON: sorted keys, compact separators, UTF-8 kept as is."""
    text = json.dumps(tape, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def read_chain(repo: Path, cassette_dir: str | PurePath | None, tapes: list[Tape]) -> ChainVerdict | None:
    """The chain in ``cassette_dir`` (default ``cassettes``) checked against the kit tapes in it, or None."""
    folder = PurePosixPath(cassette_dir or "cassettes")
    if folder.is_absolute() or ".." in folder.parts:
        return None
    rel = (folder / CHAIN_FILE).as_posix()
    path = Path(repo) / rel
    try:
        info = path.lstat()
    except OSError:
        return None
    verdict = ChainVerdict(path=rel)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        verdict.error = "not a regular file (a link is never followed)"
        return verdict
    if info.st_size > _MAX_BYTES:
        verdict.error = f"larger than {_MAX_BYTES // 1_000_000} MB, not read"
        return verdict
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        verdict.error = f"cannot be read as UTF-8 ({exc.__class__.__name__})"
        return verdict
    live = _walk(verdict, text)
    _hold_tapes(verdict, folder, live, tapes)
    return verdict


def _line_hash(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8", "surrogatepass")).hexdigest()


def _walk(verdict: ChainVerdict, text: str) -> dict[str, tuple[str, int]]:
    """Check every link; return the tapes the chain holds at its end: key -> (digest, line)."""
    live: dict[str, tuple[str, int]] = {}
    head = _GENESIS
    for number, line in enumerate(text.splitlines(), 1):
        verdict.entries = number
        where = f"{verdict.path}:{number}"
        try:
            entry = json.loads(line)
            op, tape, prev = entry["op"], entry["tape"], entry["prev"]
            if op not in _OPS or not isinstance(tape, str) or (op != "prune" and not entry.get("sha256")):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            message = "not a chain entry (a JSON object with op, tape, prev and sha256)"
            verdict.problems.append(ChainProblem("not-an-entry", message, where, True))
            head = _line_hash(line)
            continue
        if prev != head:
            message = (
                f"chain broken: this line does not follow the one before it (a line was edited, removed or "
                f"inserted after it was written); it names tape {tape[:40]}"
            )
            verdict.problems.append(ChainProblem("broken-link", message, where, True))
        head = _line_hash(line)
        if op == "prune":
            live.pop(tape, None)
        else:
            live[tape] = (str(entry["sha256"]), number)
    verdict.head = head if verdict.entries else ""
    return live


def _hold_tapes(
    verdict: ChainVerdict, folder: PurePosixPath, live: dict[str, tuple[str, int]], tapes: list[Tape]
) -> None:
    """Each kit tape directly in the chain's folder against its last entry; each live entry against a file."""
    on_disk: dict[str, Tape] = {}
    for tape in tapes:
        path = PurePosixPath(tape.path)
        if path.parent == folder and path.suffix == ".json" and tape.format in ("kit", "invalid"):
            on_disk[path.stem] = tape
    for key, tape in sorted(on_disk.items()):
        where = f"{tape.path}:1"
        if key not in live:
            message = (
                f"tape {key} is not in {verdict.path}: written outside recording, or its chain line removed"
            )
            verdict.problems.append(ChainProblem("unlisted-tape", message, where, False))
            continue
        digest, number = live[key]
        if _digest_of(tape) != digest:
            message = (
                f"tape edited after it was recorded: its content does not match its chain entry "
                f"{verdict.path}:{number}"
            )
            verdict.problems.append(ChainProblem("edited-tape", message, where, True))
    for key, (_digest, number) in sorted(live.items(), key=lambda item: item[1][1]):
        if key not in on_disk:
            message = f"chain entry names tape {key[:40]}, which is not in {folder.as_posix()}/"
            verdict.problems.append(ChainProblem("missing-tape", message, f"{verdict.path}:{number}", False))


def _digest_of(tape: Tape) -> str | None:
    if tape.format != "kit" or not tape.text:
        return None
    try:
        return tape_digest(json.loads(tape.text))
    except ValueError:
        return None


def _git(repo: Path, *args: str) -> bytes | None:
    try:
        # gitsafe: no config that runs a program, and never a lazy fetch from a "promisor" remote.
        command = gitsafe.argv("-C", str(repo), *args)
        proc = subprocess.run(command, env=gitsafe.env(), capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def chain_rewrites(repo: Path, rel: str) -> list[tuple[str, int]]:
    """``(short sha, first changed line)`` of each commit (oldest first, first parents) whose ``rel`` is not
    its parent's with lines appended. Empty without git history or without a chain in it."""
    listed = _git(
        repo, "log", "--first-parent", "--reverse", f"--max-count={_MAX_COMMITS}", "--format=%H", "--", rel
    )
    if not listed:
        return []
    rewrites: list[tuple[str, int]] = []
    previous: list[bytes] | None = None
    for sha in listed.decode("ascii", "replace").split():
        blob = _git(repo, "cat-file", "blob", f"{sha}:{rel}")
        lines = blob.splitlines() if blob is not None and len(blob) <= _MAX_BYTES else []
        if previous is not None and lines[: len(previous)] != previous:
            pairs = enumerate(zip(previous, lines, strict=False), 1)
            changed = next((n for n, (a, b) in pairs if a != b), len(lines) + 1)
            rewrites.append((sha[:7], changed))
        previous = lines
    return rewrites
