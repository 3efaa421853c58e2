"""Which files are recordings (tapes): they are never skipped for size or binary content."""

from __future__ import annotations

from pathlib import PurePosixPath

__all__ = ["TAPE_DIR_NAMES", "looks_like_tape"]

TAPE_DIR_NAMES = frozenset({"cassettes", "cassette", "tapes", "recordings", "vcr_cassettes", "fixtures_vcr"})
_TAPE_SUFFIXES = (".json", ".yaml", ".yml", ".jsonl", ".har", ".gz")
_MARKERS = (b"interactions:", b'"interactions"', b'"request"', b"request:", b'"log"')


def looks_like_tape(relpath: str, head: bytes, tape_dirs: tuple[str, ...] = ()) -> bool:
    """True for a file under a cassette folder, or a JSON/YAML file shaped like an HTTP recording."""
    path = PurePosixPath(relpath)
    if any(relpath == d or relpath.startswith(d.rstrip("/") + "/") for d in tape_dirs if d):
        return True
    if not path.name.lower().endswith(_TAPE_SUFFIXES):
        return False
    if any(part.lower() in TAPE_DIR_NAMES for part in path.parts[:-1]):
        return True
    return any(marker in head for marker in _MARKERS) and (b"response" in head)
