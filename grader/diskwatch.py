"""Who filled the workspace disk: sampled while a run runs, measured at the moment the disk is full.

In ``grade batch --jobs 2`` two candidates share the workspace disk, so a run that finds the disk full may
have been flooded by its neighbour (red-team R11). The grader cannot tell that from the run's output (a
submission can print ENOSPC) nor at the end (the flood may be deleted by then). So while a run runs, a
thread polls the disk's free space; the first time it falls below ``full``, it measures how many bytes the
candidate's own running folders hold *at that moment* (plus files its sandbox users deleted but still hold
open), and compares that with what the disk lost since the run started (docs/security.md, "Disk").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from grader.walk import tree

__all__ = ["Fill", "Held", "Watch", "held_bytes", "size_text"]

POLL = 0.25  # seconds between two samples of the free space
_WALK_FILES = 200_000  # entries one measurement may look at before it gives up (then: the run's own)
_WALK_SECONDS = 5.0


@dataclass(frozen=True)
class Held:
    """What a candidate's folders held: ``complete`` False when the count hit a cap (then the bytes are a
    lower bound and the fill is taken as the run's own)."""

    bytes: int
    complete: bool
    biggest: str = ""  # the folder holding the most of it, for the note


@dataclass(frozen=True)
class Fill:
    """The disk went full while the run ran: free space at its start and when measured, what the run held."""

    free_before: int
    free_at: int
    held: Held

    @property
    def lost(self) -> int:
        return max(0, self.free_before - self.free_at)

    @property
    def own(self) -> bool:
        """The run's own files account for the fill (at least half of what the disk lost since it started)."""
        return not self.held.complete or 2 * self.held.bytes >= self.lost


class Watch:
    """Polls ``root``'s disk from a thread while ``with`` runs; ``fill`` is the first full moment measured.

    ``measure`` is called from the thread at that moment. A measurement during which the free space moved by
    more than half of what was lost (files deleted under the walk) is not kept: the next sample tries again.
    """

    def __init__(self, root: Path, free_before: int, full: int, measure: Callable[[], Held]) -> None:
        self.root = root
        self.free_before = free_before
        self.full = full
        self.measure = measure
        self.min_free = free_before
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

    def _free(self) -> int | None:
        try:
            return shutil.disk_usage(self.root).free
        except OSError:
            return None

    def _poll(self) -> None:
        while True:
            free = self._free()
            if free is not None:
                self.min_free = min(self.min_free, free)
                if free < self.full and self.fill is None:
                    self.seen_full = True
                    self._try_measure(free)
            if self._stop.wait(POLL):
                return

    def _try_measure(self, free: int) -> None:
        held = self.measure()
        after = self._free()
        lost = max(1, self.free_before - free)
        if after is None or abs(after - free) * 2 > lost:
            return  # the disk changed a lot under the walk: not a measurement of this moment
        self.fill = Fill(self.free_before, min(free, after), held)


def held_bytes(folders: Mapping[Path, str], uids: Collection[int], device: int) -> Held:
    """Bytes (allocated blocks) under ``folders`` (path: what to call it in a note), walked with
    `grader.walk.tree` (never into a link, without recursion), capped; plus files on ``device`` owned by one
    of ``uids`` that were deleted but are still open (a process's fd)."""
    started = time.monotonic()
    total = 0
    seen = 0
    per_top: dict[str, int] = {}
    for top, name in folders.items():
        here_total = 0
        for folder, below, others in tree(top, max_depth=None):
            for entry in below + others:
                seen += 1
                if seen > _WALK_FILES or time.monotonic() - started > _WALK_SECONDS:
                    return Held(total + here_total, False, _biggest(per_top))
                with contextlib.suppress(OSError):  # gone under the walk: Watch checks the free space
                    here_total += os.lstat(os.path.join(folder, entry)).st_blocks * 512
        per_top[name] = per_top.get(name, 0) + here_total
        total += here_total
    unlinked = _deleted_open(uids, device, started) if uids else 0
    if unlinked:
        per_top["(deleted files still open)"] = unlinked
    return Held(total + unlinked, True, _biggest(per_top))


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
