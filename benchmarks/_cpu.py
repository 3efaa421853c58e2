"""CPU time of a command and of everything it starts, sandboxed grandchildren included, from a cgroup.

`getrusage(RUSAGE_CHILDREN)` misses most of a grade: the sandbox's processes live in pid namespaces whose
init exits without waiting for them, so their time is never added to any parent. A cgroup counts every
process started inside it, wherever it is reparented. Needs a cgroup folder this process may create (root on
a cgroup v1 ``cpuacct`` hierarchy, or a writable cgroup v2 tree); elsewhere `CpuMeter.available` is False and
the benchmark reports the CPU rows as not measured.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

__all__ = ["CpuMeter"]

_V1 = Path("/sys/fs/cgroup/cpuacct")
_V2_CANDIDATES = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


class CpuMeter:
    """A cgroup of the benchmark's own; `wrap(argv)` runs a command inside it, `seconds()` reads its total."""

    def __init__(self, name: str) -> None:
        self.folder: Path | None = None
        self._v1 = False
        for base, v1 in ((_V1, True), *((p, False) for p in _V2_CANDIDATES)):
            usage = base / ("cpuacct.usage" if v1 else "cpu.stat")
            if not usage.is_file():
                continue
            folder = base / f"{name}-{os.getpid()}"
            try:
                folder.mkdir(exist_ok=True)
            except OSError:
                continue
            self.folder, self._v1 = folder, v1
            # A cgroup v2 tree may refuse the move (no delegation, "no internal processes"): try it once.
            if subprocess.run(self.wrap(["true"]), capture_output=True, check=False).returncode == 0:
                break
            self.close()
            self.folder = None

    @property
    def available(self) -> bool:
        return self.folder is not None

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the cgroup (unchanged when there is none)."""
        if self.folder is None:
            return argv
        join = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
        return ["/bin/sh", "-c", join, str(self.folder), *argv]

    def seconds(self) -> float:
        """CPU seconds (user + system) of every process that ever ran in the cgroup."""
        if self.folder is None:
            return float("nan")
        if self._v1:
            return int((self.folder / "cpuacct.usage").read_text()) / 1e9
        for line in (self.folder / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        return float("nan")

    def close(self) -> None:
        if self.folder is not None:
            with contextlib.suppress(OSError):  # a process still inside: left for the OS, harmless
                self.folder.rmdir()
