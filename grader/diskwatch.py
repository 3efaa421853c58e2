"""Who filled the workspace disk: sampled while a run runs, measured at the moment the disk is full.

Full means out of bytes or out of files (inodes): empty files exhaust a disk's inodes long before its bytes
(red team 30: a default tmpfs of 8 GiB has about 3 million, which a loop of ``open(...).close()`` spends in
under a minute), and a disk with no inode left refuses every copy however many bytes it has free.

In ``grade batch --jobs 2`` two candidates share the workspace disk, so a run that finds the disk full may
have been flooded by its neighbour (red-team R11). The grader cannot tell that from the run's output (a
submission can print ENOSPC) nor at the end (the flood may be deleted by then). So while a run runs, a
thread polls the disk's free space and free files; the first time either falls below its floor, it measures
how many bytes and files the candidate's own running folders hold *at that moment* (plus files its sandbox
users deleted but still hold open), and compares that with what the disk lost since the run started
(docs/security.md, "Disk").
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from grader.walk import tree

__all__ = ["Fill", "Held", "Room", "Watch", "held_by", "room", "size_text"]

POLL = 0.25  # seconds between two samples of the free space
_WALK_FILES = 200_000  # entries one measurement may look at before it gives up (then: the run's own)
_WALK_SECONDS = 5.0
_MEANINGFUL_BYTES = 1024**2  # below this, what a run holds is told by its count of files


@dataclass(frozen=True)
class Room:
    """What a disk has free: bytes, and files (inodes; a file system without an inode count says plenty)."""

    bytes: int
    files: int


_PLENTY = 1 << 62


def room(path: Path) -> Room | None:
    """``path``'s disk's free bytes and files for an unprivileged writer; None when it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return Room(st.f_bavail * st.f_frsize, st.f_favail if st.f_files else _PLENTY)


@dataclass(frozen=True)
class Held:
    """What a candidate's folders held: ``complete`` False when the count hit a cap (then the bytes and files
    are a lower bound and the fill is taken as the run's own)."""

    bytes: int
    complete: bool
    biggest: str = ""  # the folder holding the most of it, for the note
    files: int = 0  # entries (files, folders, links) under the folders


@dataclass(frozen=True)
class Fill:
    """The disk went full while the run ran: free room at its start and when measured, what the run held.

    ``files`` True: it ran out of files (inodes), and ``free_before``/``free_at`` count files, not bytes.
    """

    free_before: int
    free_at: int
    held: Held
    files: bool = False

    @property
    def lost(self) -> int:
        return max(0, self.free_before - self.free_at)

    @property
    def own(self) -> bool:
        """The run's own files account for the fill (at least half of what the disk lost since it started)."""
        held = self.held.files if self.files else self.held.bytes
        return not self.held.complete or 2 * held >= self.lost

    def amount(self, n: int) -> str:
        """``n`` of what ran out, as a reviewer reads it."""
        return f"{n:,} files" if self.files else size_text(n)


class Watch:
    """Polls ``root``'s disk from a thread while ``with`` runs; ``fill`` is the first full moment measured.

    Full: fewer than ``full`` bytes or ``full_files`` files free. ``measure`` is called from the thread at
    that moment. A measurement during which the free room moved by more than half of what was lost (files
    deleted under the walk) is not kept: the next sample tries again.
    """

    def __init__(
        self,
        root: Path,
        before: Room,
        full: int,
        full_files: int,
        measure: Callable[[], Held],
        *,
        floor: Room | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        # ``floor``: below it (bytes or files) a fill that is the run's own sets ``stop`` (the sandbox kills
        # the run), so that one candidate's flood leaves room for the grader and its neighbours.
        self.floor = floor
        self.stop = stop
        self.stopped_at: Fill | None = None
        self._next_try = 0.0
        self.root = root
        self.before = before
        self.free_before = before.bytes
        self.full = full
        self.full_files = full_files
        self.measure = measure
        self.min_free = before.bytes
        self.min_files = before.files
        self.fill: Fill | None = None
        self.seen_full = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="diskwatch", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while True:
            now = room(self.root)
            if now is not None:
                self.min_free = min(self.min_free, now.bytes)
                self.min_files = min(self.min_files, now.files)
                if self._below_floor(now):
                    self._try_stop(now)
                if (now.bytes < self.full or now.files < self.full_files) and self.fill is None:
                    self.seen_full = True
                    self._try_measure(now)
            if self._stop.wait(POLL):
                return

    def _below_floor(self, now: Room) -> bool:
        floor = self.floor
        if floor is None or self.stop is None or self.stopped_at is not None:
            return False
        return (now.bytes < floor.bytes or now.files < floor.files) and time.monotonic() >= self._next_try

    def _try_stop(self, now: Room) -> None:
        assert self.floor is not None and self.stop is not None
        self._next_try = time.monotonic() + 2.0  # a neighbour's flood: look again, not at every sample
        held = self.measure()
        files = now.bytes >= self.floor.bytes
        before, free = (self.before.files, now.files) if files else (self.before.bytes, now.bytes)
        fill = Fill(before, free, held, files=files)
        if fill.own:
            self.stopped_at = fill
            self.stop.set()

    def _try_measure(self, now: Room) -> None:
        held = self.measure()
        after = room(self.root)
        files = now.bytes >= self.full  # out of files, not of bytes
        if after is None:
            return
        if files:
            free, before, later = now.files, self.before.files, after.files
        else:
            free, before, later = now.bytes, self.before.bytes, after.bytes
        lost = max(1, before - free)
        if abs(later - free) * 2 > lost:
            return  # the disk changed a lot under the walk: not a measurement of this moment
        self.fill = Fill(before, min(free, later), held, files=files)


def held_by(folders: Mapping[Path, str], uids: Collection[int], device: int) -> Held:
    """Bytes (allocated blocks) and entries under ``folders`` (path: what to call it in a note), walked with
    `grader.walk.tree` (never into a link, without recursion), capped; plus files on ``device`` owned by one
    of ``uids`` that were deleted but are still open (a process's fd). ``biggest`` is the folder holding
    the most bytes, or the most entries when they hold next to no bytes (a flood of empty files)."""
    started = time.monotonic()
    total = seen = 0
    per_top: dict[str, int] = {}
    per_top_files: dict[str, int] = {}
    for top, name in folders.items():
        here_total = here_seen = 0
        for folder, below, others in tree(top, max_depth=None):
            for entry in below + others:
                here_seen += 1
                if seen + here_seen > _WALK_FILES or time.monotonic() - started > _WALK_SECONDS:
                    per_top_files[name] = per_top_files.get(name, 0) + here_seen
                    biggest = _biggest(per_top_files)
                    return Held(total + here_total, False, biggest, seen + here_seen)
                with contextlib.suppress(OSError):  # gone under the walk: Watch checks the free space
                    here_total += os.lstat(os.path.join(folder, entry)).st_blocks * 512
        per_top[name] = per_top.get(name, 0) + here_total
        per_top_files[name] = per_top_files.get(name, 0) + here_seen
        total += here_total
        seen += here_seen
    unlinked = _deleted_open(uids, device, started) if uids else 0
    if unlinked:
        per_top["(deleted files still open)"] = unlinked
    biggest = _biggest(per_top) if total + unlinked >= _MEANINGFUL_BYTES else _biggest(per_top_files)
    return Held(total + unlinked, True, biggest, seen)


def _deleted_open(uids: Collection[int], device: int, started: float) -> int:
    """Bytes of deleted files on ``device`` that a process holds open and one of ``uids`` owns.

    Only ``stat`` through ``/proc/<pid>/fd/<n>`` (the open file's own metadata), never an open: a run that
    fills the disk and unlinks its files while holding them open still holds those bytes.
    """
    total = 0
    counted: set[int] = set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        if time.monotonic() - started > _WALK_SECONDS:
            break
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for name in names:
            path = f"{fds}/{name}"
            try:
                if not os.readlink(path).endswith(" (deleted)"):
                    continue
                info = os.stat(path)
            except OSError:
                continue
            if (
                info.st_dev == device
                and info.st_uid in uids
                and info.st_nlink == 0
                and info.st_ino not in counted
            ):
                counted.add(info.st_ino)
                total += info.st_blocks * 512
    return total


def _biggest(per_top: dict[str, int]) -> str:
    return max(per_top, key=lambda k: per_top[k]) if per_top else ""


def size_text(n: int) -> str:
    """Bytes as a reviewer reads them (MiB from 1 MiB up)."""
    if n >= 1024**2:
        return f"{n / 1024**2:.0f} MiB"
    return f"{n / 1024:.0f} KiB"
