"""The working tree: every regular file (links never followed, .git skipped), read once as bytes."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

from grader.safeio import read_bytes
from grader.secrets.decode import decompress, wide_text
from grader.secrets.findings import SecretFinding
from grader.secrets.scanner import Scanner
from grader.secrets.tapes import looks_like_tape
from grader.walk import files as walk_files

__all__ = ["MAX_FILE_BYTES", "scan_blob", "scan_tree_with", "walk"]

# Larger non-tape files are listed as skipped (a vendored dataset, a model file); tapes are always read.
MAX_FILE_BYTES = 16 * 1024 * 1024
_READ_CAP = 256 * 1024 * 1024  # tapes are scanned past MAX_FILE_BYTES; nothing is read past this
_HEAD = 8192


def walk(repo: Path) -> list[tuple[str, os.stat_result]]:
    """(repo-relative posix path, lstat) of each regular file, sorted; symlinks and .git are left out.

    Every file, with no count cap: a secret must not hide behind the ten-thousandth file.
    """
    out: list[tuple[str, os.stat_result]] = []
    for path in walk_files(repo, skip={".git"}, max_files=None):
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append((path.relative_to(repo).as_posix(), st))
    return sorted(out)


def scan_tree_with(scanner: Scanner, repo: Path, *, tape_dirs: tuple[str, ...] = ()) -> list[SecretFinding]:
    """Scan every file of the working tree; tapes are reported with kind "tape", other files "tree"."""
    findings: list[SecretFinding] = []
    for rel, st in walk(repo):
        tape_by_path = looks_like_tape(rel, b"", tape_dirs)
        if st.st_size > MAX_FILE_BYTES and not tape_by_path:
            scanner.stats.skipped.append(f"{rel}: {st.st_size} bytes, over the {MAX_FILE_BYTES} byte cap")
            continue
        try:
            data = _read_nofollow(repo / rel)
        except OSError as exc:
            scanner.stats.skipped.append(f"{rel}: unreadable ({exc.strerror})")
            continue
        findings += scan_blob(scanner, data, rel, tape_dirs=tape_dirs)
    return findings


def scan_blob(
    scanner: Scanner,
    data: bytes,
    rel: str,
    *,
    commit: str | None = None,
    kind: str | None = None,
    tape_dirs: tuple[str, ...] = (),
) -> list[SecretFinding]:
    """Scan one file's bytes: gzip files are inflated, other binary files skipped unless they are tapes."""
    stats = scanner.stats
    stats.bytes += len(data)
    head = data[:_HEAD]
    is_tape = looks_like_tape(rel, head, tape_dirs)
    if commit is None:
        stats.files += 1
        stats.tapes += is_tape
    encoding = None
    inflated = decompress(data) if head[:2] == b"\x1f\x8b" else None
    if inflated is not None:
        data, encoding = inflated[0], inflated[1]
    elif b"\0" in head and (wide := wide_text(data)) is not None:
        data, encoding = wide  # UTF-16/32 text (what Windows PowerShell's `>` writes) is text
    elif b"\0" in head and not is_tape:
        return []
    found = scanner.scan_bytes(data, source=rel, kind=kind or ("tape" if is_tape else "tree"), commit=commit)
    if encoding:
        found = [replace(f, encoding=f.encoding or encoding) for f in found]
    return found


def _read_nofollow(path: Path) -> bytes:
    # A file swapped for a link or a FIFO between the walk and the read is refused (grader/safeio.py).
    return read_bytes(path, cap=_READ_CAP)
