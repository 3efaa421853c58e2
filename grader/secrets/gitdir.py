"""An archive's own `.git`, read as files: what the hiring team received besides the history a clone holds.

A zip of a project folder carries its whole git directory: the config (a remote URL with a token in it),
the reflogs (the message of a commit since reset away), and objects no ref reaches (a commit that added a
key and was reset away). The history scan reads what a clone of its refs holds; this reads the rest, as
bytes: loose objects inflated, packs entry by entry (`grader.gitpack`), everything else as it is. git is
never run on it (red team 13, F2b). A plain folder is not read this way: its `.git` is the reviewer's own
clone (its config may hold the reviewer's token), not something the candidate shipped.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from grader import walk
from grader.gitpack import PACK_MAGIC, Allowance, pack_bodies
from grader.safeio import read_bytes
from grader.secrets.findings import SecretFinding
from grader.secrets.scanner import Scanner

__all__ = ["scan_git_dir"]

# Inflated bytes for the whole folder: its reachable objects were read once already by the history scan.
_INFLATE_TOTAL = 256 * 1024 * 1024
_MAX_FILE_BYTES = 64 * 1024 * 1024  # a pack is read whole; an archive holds at most 200 MB in all
_PACK_ENTRIES = 200_000  # each costs Python time whatever it inflates to (red team 14)


def scan_git_dir(scanner: Scanner, gitdir: Path, *, known: set[tuple[str, str]]) -> list[SecretFinding]:
    """Findings in the files of ``gitdir`` (located as ``.git/<path>:line``) that ``known`` (rule,
    fingerprint) pairs, already reported elsewhere, do not hold; each secret once."""
    found: dict[tuple[str, str], SecretFinding] = {}
    allowance = Allowance(_INFLATE_TOTAL, _PACK_ENTRIES)
    for path in walk.files(gitdir, skip=(), max_files=None):
        rel = ".git/" + path.relative_to(gitdir).as_posix()
        try:
            data = read_bytes(path, cap=_MAX_FILE_BYTES, root=gitdir)
        except OSError as exc:
            scanner.stats.unscanned.append(f"{rel}: {exc.strerror or 'not read'} (the archive's .git)")
            continue
        scanner.stats.bytes += len(data)
        for body in _bodies(rel, data, allowance, scanner):
            for finding in scanner.scan_bytes(body, source=rel, kind="history"):
                key = (finding.rule, finding.fingerprint)
                if key not in known:
                    found.setdefault(key, finding)
    return list(found.values())


def _bodies(rel: str, data: bytes, allowance: Allowance, scanner: Scanner) -> list[bytes]:
    pack = data[:4] == PACK_MAGIC
    loose = rel.startswith(".git/objects/") and len(rel.split("/")) == 4
    if not (pack or loose):
        return [data]
    if allowance.spent():
        spent = f"{_INFLATE_TOTAL} bytes or {_PACK_ENTRIES} pack entries"
        scanner.stats.unscanned.append(f"{rel}: not inflated, the archive's .git had {spent} read")
        return [data]
    if pack:
        bodies = list(pack_bodies(data, allowance))
        if len(bodies) < int.from_bytes(data[8:12], "big") and allowance.spent():
            scanner.stats.unscanned.append(f"{rel}: read to entry {len(bodies)} (the archive's .git)")
        return bodies
    try:  # a loose object: zlib, "<type> <size>\0<content>"
        body = zlib.decompressobj().decompress(data, allowance.bytes)
    except zlib.error:
        return [data]
    allowance.bytes -= len(body)
    return [body]
