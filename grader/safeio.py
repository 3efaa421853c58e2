"""Read a file from a place a submission controlled, or could have: never follow a link, never block.

Tapes, REPLAY.md and sources come from the checkout; audit logs, result logs and JUnit files sit in folders
the sandboxed run owned while it ran. Any of them may have been replaced by a link (to ``/dev/zero``, to
``/etc/shadow``, out of the workspace), a FIFO (an ``open`` that never returns) or a device. Every such open
goes through here: each component below a trusted folder is opened with ``O_NOFOLLOW``, the file itself with
``O_NONBLOCK``, ``fstat`` must say "regular file", and no more than a cap is ever read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DEFAULT_CAP", "UnsafeFile", "is_regular", "read_blocks", "read_bytes", "read_text", "within"]

DEFAULT_CAP = 16 * 1024**2
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | _NOFOLLOW | _DIRECTORY | getattr(os, "O_CLOEXEC", 0)


class UnsafeFile(OSError):
    """The file is a link, has a link among its folders, is not a regular file, or is over the cap."""


def within(root: Path, rel: str | Path) -> Path | None:
    """``root / rel`` when it names a place below ``root``: None for an absolute ``rel``, one that climbs
    out with ``..``, or one that leads out through a link (red team 31: a ``testpaths`` entry of
    ``../../…/host/folder`` had the grader rename host folders as root)."""
    pure = Path(rel)
    if pure.is_absolute() or ".." in pure.parts:
        return None
    joined = root / pure
    real, base = os.path.realpath(joined), os.path.realpath(root)
    return joined if real == base or real.startswith(base.rstrip("/") + "/") else None


def _components(path: Path, root: Path | None) -> tuple[Path, list[str]]:
    path = Path(os.path.abspath(path))
    base = Path(os.path.abspath(root)) if root is not None else path.parent
    try:
        rel = path.relative_to(base)
    except ValueError:
        raise UnsafeFile(errno.EPERM, "outside the folder it was looked up in", str(path)) from None
    parts = [p for p in rel.parts if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafeFile(errno.EPERM, "not a file below the folder it was looked up in", str(path))
    return base, parts


def _open(path: Path, root: Path | None) -> int:
    """A descriptor on ``path``, every component below ``root`` (default: its folder) opened without links."""
    base, parts = _components(path, root)
    dir_fd = os.open(base, os.O_RDONLY | _DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeFile(exc.errno, f"{part} is a link or not a folder", str(path)) from None
                raise
            os.close(dir_fd)
            dir_fd = nxt
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeFile(exc.errno, "is a link", str(path)) from None
            if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing elsewhere
                raise UnsafeFile(exc.errno, "not a regular file", str(path)) from None
            raise
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeFile(errno.EPERM, "not a regular file", str(path))
    return fd


def is_regular(path: Path, *, root: Path | None = None) -> bool:
    """Whether ``path`` is a regular file reached without any link (never blocks)."""
    try:
        os.close(_open(path, root))
    except OSError:
        return False
    return True


def read_bytes(
    path: Path | str, *, cap: int = DEFAULT_CAP, root: Path | str | None = None, truncate: bool = False
) -> bytes:
    """The file's bytes; raises UnsafeFile for a link, a non-regular file, or (unless ``truncate``) more
    than ``cap`` bytes. ``truncate``: the first ``cap`` bytes of a longer file. FileNotFoundError as usual.

    ``root``: a folder the grader trusts (its own, or the pristine copy); every component below it is
    checked. Without it only the file itself is (its folder is the caller's).
    """
    fd = _open(Path(path), Path(root) if root is not None else None)
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        if not truncate:
            raise UnsafeFile(errno.EFBIG, f"over the {cap} byte cap", str(path))
        data = data[:cap]
    return data


def read_blocks(path: Path | str, *, block: int, cap: int, root: Path | str | None = None) -> Iterator[bytes]:
    """The file's bytes in blocks of up to ``block`` bytes, at most ``cap`` in all (the rest is not read),
    opened as `read_bytes` opens it (no link, regular files only)."""
    fd = _open(Path(path), Path(root) if root is not None else None)
    try:
        size = 0
        while size < cap:
            chunks: list[bytes] = []
            got = 0
            while got < block and size + got < cap:
                chunk = os.read(fd, min(1 << 20, block - got, cap - size - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            if not got:
                return
            size += got
            yield b"".join(chunks)
    finally:
        os.close(fd)


def read_text(
    path: Path | str, *, cap: int = DEFAULT_CAP, root: Path | str | None = None, truncate: bool = False
) -> str:
    """`read_bytes` decoded as UTF-8, undecodable bytes replaced."""
    return read_bytes(path, cap=cap, root=root, truncate=truncate).decode("utf-8", errors="replace")
