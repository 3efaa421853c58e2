"""A CPU group of its own for every sandboxed command (red-team R4).

The scheduler shares the CPU between runnable processes, and under autogroup between sessions: a candidate
whose suite starts a hundred busy processes, each in a session of its own, took nearly all of the machine
from the candidate graded beside it in a batch, whose suite then timed out and scored 0. Each sandboxed
command is started inside a fresh cgroup with the default CPU weight, so all of its processes together get
one command's share, whatever they fork; the group is removed once the command is dead.

Layers, in order: cgroup v2 when the grader's own group may hold child groups with the ``cpu`` controller
(the root group, or a delegated one whose ``cgroup.subtree_control`` already has ``cpu``); else the v1
``cpu`` hierarchy (child groups below the grader's own); else none, and the report's ``isolation.cpu`` says
``shared``. Only root can do either. The group's path is neutral (``run-<hex>``), and the sandbox's cgroup
namespace shows the command only its own group as ``/``.
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

__all__ = ["cpu_group", "cpu_layer"]

_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class _Layout:
    kind: str  # "cgroup-v2" | "cgroup-v1"
    parent: Path  # the folder run groups are made in


def cpu_layer() -> str:
    """``cgroup-v2``, ``cgroup-v1`` or ``shared`` (no group of its own: processes share the CPU as usual)."""
    layout = _layout()
    return layout.kind if layout is not None else "shared"


@contextlib.contextmanager
def cpu_group() -> Iterator[Path | None]:
    """A fresh CPU group for one command: yields the ``cgroup.procs`` file its first process writes its pid
    to (None without a CPU layer); removes the group afterwards."""
    layout = _layout()
    if layout is None:
        yield None
        return
    group = layout.parent / f"run-{secrets.token_hex(6)}"
    try:
        group.mkdir()
    except OSError:
        yield None
        return
    try:
        yield group / "cgroup.procs"
    finally:
        _remove(group)


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
def _layout() -> _Layout | None:
    if os.geteuid() != 0:
        return None
    return _v2() or _v1()


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


def _v2() -> _Layout | None:
    for mount in (_ROOT, _ROOT / "unified"):
        if not (mount / "cgroup.controllers").is_file():
            continue
        own = _own_group("")
        if own is None:
            return None
        parent = mount / own.lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text(encoding="utf-8").split()
            if "cpu" not in enabled and own == "/":
                (parent / "cgroup.subtree_control").write_text("+cpu", encoding="utf-8")
                enabled.append("cpu")
        except OSError:
            continue
        if "cpu" in enabled and _can_make_groups(parent):
            return _Layout("cgroup-v2", parent)
    return None


def _v1() -> _Layout | None:
    mount = _ROOT / "cpu"
    own = _own_group("cpu")
    if own is None or not (mount / "cpu.shares").is_file():
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
