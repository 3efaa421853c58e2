"""Control groups of its own for every sandboxed command: a CPU share and a memory ceiling (red-team R4, R6).

The scheduler shares the CPU between runnable processes, and under autogroup between sessions: a candidate
whose suite starts a hundred busy processes, each in a session of its own, took nearly all of the machine
from the candidate graded beside it in a batch, whose suite then timed out and scored 0. And the address-space
rlimit caps each process, not a run: 256 processes of 4 GiB each could exhaust the host's memory. Each
sandboxed command is started inside fresh groups: one with the default CPU weight, so all of its processes
together get one command's share whatever they fork, and one whose memory limit (`MEMORY_LIMIT`) covers all
of them together; the groups are removed once the command is dead.

Layers, per controller, in order: cgroup v2 when the grader's own group may hold child groups with that
controller (the root group, or a delegated one whose ``cgroup.subtree_control`` already has it); else the v1
hierarchy of that controller (child groups below the grader's own); else none, and the report's
``isolation.cpu`` / ``isolation.memory`` say ``shared``. Only root can do either. Group paths are neutral
(``run-<hex>``), and the sandbox's cgroup namespace shows the command only its own groups as ``/``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MEMORY_LIMIT", "cpu_layer", "memory_layer", "run_groups"]

_ROOT = Path("/sys/fs/cgroup")
# Resident memory of one command and everything it starts, together (swap included where the kernel
# accounts it): the per-process address-space rlimit, for the whole run.
MEMORY_LIMIT = 4 * 1024**3


@dataclass(frozen=True)
class _Layout:
    kind: str  # "cgroup-v2" | "cgroup-v1"
    parent: Path  # the folder run groups are made in


def cpu_layer() -> str:
    """``cgroup-v2``, ``cgroup-v1`` or ``shared`` (no group of its own: processes share the CPU as usual)."""
    layout = _layout("cpu")
    return layout.kind if layout is not None else "shared"


def memory_layer() -> str:
    """``cgroup-v2``, ``cgroup-v1`` or ``shared`` (no ceiling for the run as a whole, only per process)."""
    layout = _layout("memory")
    return layout.kind if layout is not None else "shared"


@contextlib.contextmanager
def run_groups() -> Iterator[list[Path]]:
    """Fresh groups for one command: yields the ``cgroup.procs`` files its first process writes its pid to
    (none without a layer; one file when v2 serves both controllers); removes the groups afterwards."""
    groups: list[Path] = []
    try:
        for controller in ("cpu", "memory"):
            layout = _layout(controller)
            if layout is None:
                continue
            if any(g.parent == layout.parent for g in groups):
                group = next(g for g in groups if g.parent == layout.parent)  # v2: one group, both
            else:
                group = layout.parent / f"run-{secrets.token_hex(6)}"
                try:
                    group.mkdir()
                except OSError:
                    continue
                groups.append(group)
            if controller == "memory":
                _limit_memory(group, layout.kind)
        yield [g / "cgroup.procs" for g in groups]
    finally:
        for group in groups:
            _remove(group)


def _limit_memory(group: Path, kind: str) -> None:
    if kind == "cgroup-v2":
        writes = [("memory.max", MEMORY_LIMIT), ("memory.swap.max", 0)]
    else:
        writes = [("memory.limit_in_bytes", MEMORY_LIMIT), ("memory.memsw.limit_in_bytes", MEMORY_LIMIT)]
    for name, value in writes:
        with contextlib.suppress(OSError):  # swap accounting may be off: the memory limit still holds
            (group / name).write_text(str(value), encoding="utf-8")


def _remove(group: Path) -> None:
    # The command's pid namespace is gone, but the kernel may need a moment to reap its last processes.
    deadline = time.monotonic() + 5.0
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)


@functools.cache
def _layout(controller: str) -> _Layout | None:
    if os.geteuid() != 0:
        return None
    return _v2(controller) or _v1(controller)


def _own_group(controller: str) -> str | None:
    """The grader's own group in the hierarchy of ``controller`` ("" for v2), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        names = controllers.split(",") if controllers else []
        if (controller in names) if controller else not names:
            return path
    return None


def _v2(controller: str) -> _Layout | None:
    for mount in (_ROOT, _ROOT / "unified"):
        if not (mount / "cgroup.controllers").is_file():
            continue
        own = _own_group("")
        if own is None:
            return None
        parent = mount / own.lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text(encoding="utf-8").split()
            if controller not in enabled and own == "/":
                (parent / "cgroup.subtree_control").write_text(f"+{controller}", encoding="utf-8")
                enabled.append(controller)
        except OSError:
            continue
        if controller in enabled and _can_make_groups(parent):
            return _Layout("cgroup-v2", parent)
    return None


def _v1(controller: str) -> _Layout | None:
    mount = _ROOT / controller
    own = _own_group(controller)
    probe = "cpu.shares" if controller == "cpu" else "memory.limit_in_bytes"
    if own is None or not (mount / probe).is_file():
        return None
    parent = mount / own.lstrip("/")
    return _Layout("cgroup-v1", parent) if _can_make_groups(parent) else None


def _can_make_groups(parent: Path) -> bool:
    probe = parent / f"run-{secrets.token_hex(6)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    _remove(probe)
    return True
