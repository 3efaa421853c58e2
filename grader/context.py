"""What a check sees: workspace, manifest and environment, plus memoized sandboxed runs of submission code."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring as defused_fromstring

from grader import diskwatch, sandbox, tamper, unshadow
from grader.acquire import copy_checkout, keep_pristine, no_space, no_space_reason, no_space_text
from grader.audit import AuditLog, Results, read_audit_log, read_result_log
from grader.deeptree import remove_tree
from grader.errors import NotAssessable
from grader.manifest import (
    SuiteCommand,
    WholeSuite,
    suite_command,
    tests_the_run_changed,
    whole_suite_because,
)
from grader.safeio import UnsafeFile, is_regular, read_bytes

if TYPE_CHECKING:
    from grader.acquire import Workspace
    from grader.install import Env
    from grader.manifest import Manifest
    from grader.requirements import Dependencies
    from grader.sandbox import RunResult

T = TypeVar("T")

__all__ = [
    "Context",
    "ReplayRun",
    "for_want_of_room",
    "makefile_target_lines",
    "makefile_targets",
    "pytest_plugin_modules",
    "read_junit",
]

# Loaded explicitly under PYTEST_DISABLE_PLUGIN_AUTOLOAD: pytest-socket blocks sockets inside the test process
# (a second layer under the network namespace) and _grader_pytest writes the result log the grader trusts.
_GRADER_PLUGINS = ("pytest_socket", tamper.RESULTS_MODULE)
_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_TARGET_LINE = re.compile(r"^([A-Za-z0-9_.\-/ ]+?)\s*::?(?!=)")
_MAX_FIRST_FAILURES = 5
_MODULE = re.compile(r"[A-Za-z_][\w.]*")
# A traceback entry in pytest's long report, e.g. "tests/test_net.py:13: in test_raw"
_FRAME = re.compile(r"^(?P<file>[^\s:][^:\n]*?\.py):(?P<line>\d+): ", re.MULTILINE)
_BLOCKED_ARGS = re.compile(r"^_args = \('(?P<host>[^']*)', (?P<port>\d+)", re.MULTILINE)
# A run that starts with less free space than this in the workspace and then reports a full disk failed
# because of the grader's disk (not-assessable); with more room, whoever's files filled it while the run ran
# did (grader/diskwatch.py): the run's own, graded as it ran, or a neighbour's, not-assessable.
_ROOM = 256 * 1024**2
_FULL = 256 * 1024  # free space below this: the disk is full
_FILES_ROOM = 10_000  # free inodes below this: a copy of a checkout may not fit
_FILES_FULL = 64  # free inodes below this: the disk is full (of files)
_FILLED_UNDER = "the workspace disk filled while this run ran"
_LOG_CAP = 64 * 1024**2  # a log a run wrote (JUnit, misses): read no more than this
_MAKEFILE_CAP = 1_000_000


@dataclass
class ReplayRun:
    """The replay suite's one run in the sandbox, and what the grader read back from its own logs."""

    command: list[str]
    run: RunResult
    results: Results | None  # None: the suite never reported a single test (crash, timeout before collection)
    audit: AuditLog
    junit: Path | None
    misses: list[dict[str, object]] = field(default_factory=list)  # CASSETTE_MISS_LOG entries
    blocked: list[tuple[str, str]] = field(default_factory=list)  # (file:line, what) refused by pytest-socket
    # Tamper evidence (docs/security.md). guard: the guard plugin's log, written through an inherited fd to a
    # file the sandbox user cannot open by path; None when the guard never wrote (plugins switched off).
    guard: tamper.GuardLog | None = None
    scan: tamper.TamperScan | None = None  # static scan of conftest files, plugins and config
    # rerun without the submission's hooks (--noconftest, its configuration's addopts and `-p` plugins off),
    # when outcome hooks were found or the guard saw a test function replaced by the submission's code
    noconftest: ReplayRun | None = None
    # the same in a clean interpreter, pytest called directly (no Makefile): when the guard still saw the
    # test functions replaced without conftest files (a plugin the Makefile's command line names)
    hookless: ReplayRun | None = None
    # conftest files and plugins kept for their fixtures, every hook implementation of theirs taken away
    # once a test's fixtures are set up: when tests that passed errored without conftest files (red team 23)
    unhooked: ReplayRun | None = None
    unskipped: ReplayRun | None = None  # rerun with skip/xfail marks stripped, when tests were skipped
    # rerun in a clean interpreter (python -I, from a scratch copy), when start-up files were found
    clean: ReplayRun | None = None
    # every test the repository holds, in a clean interpreter, when the suite's command may leave some out
    # (it names test files or ids, or ignores some: grader.manifest.WholeSuite)
    whole: ReplayRun | None = None
    left_out_because: str = ""  # why the whole suite was run (WholeSuite.why), for the evidence
    # paths the whole-suite copy renamed so pytest collects them (its path -> the submission's), so that the
    # evidence names the file the reviewer opens
    renamed: dict[str, str] = field(default_factory=dict)
    # test files the suite's own run deleted or rewrote (red team 4, F8): their tests count from `whole`
    changed_tests: list[str] = field(default_factory=list)
    # the suite's own run had its assert statements compiled out (python -O): every test counts from `whole`
    optimized: bool = False
    log_mismatch: str = ""  # the submission-writable result log disagrees with the guard
    how: str = ""  # where the command came from (grader.manifest.SuiteCommand.how), for the evidence


class Context:
    """Everything a check may use. Checks read `repo`; code from it runs only through `run`/`replay_run`.

    ``repo`` is the pristine copy (`Workspace.pristine`: the checkout as acquired, which no sandboxed run can
    write); ``checkout`` is the working copy the replay suite and the other runs use, hostile once they ran.
    """

    def __init__(
        self,
        workspace: Workspace,
        manifest: Manifest,
        *,
        env: Env | None,
        install_error: str | None = None,
        install_failed: bool = False,
        dependencies: Dependencies | None = None,
        thresholds: Mapping[str, float] | None = None,
        timeout: float = 300.0,
        budget: float | None = None,
        started: float | None = None,
    ) -> None:
        self.workspace = workspace
        self.checkout: Path = workspace.repo
        self._pristine: Path | None = getattr(workspace, "pristine", None)
        self.repo: Path = self._pristine or workspace.repo
        self.manifest = manifest
        self.env = env
        self.install_error = install_error if env is None else None
        if env is None and not self.install_error:
            self.install_error = "the submission's environment was not installed"
        # No environment because of the submission's own dependencies (grader.install.InstallFailed): the
        # rows that need a run are scored on that evidence, never marked not assessable.
        self.install_failed = env is None and install_failed
        self.dependencies = dependencies  # what was installed, refused or overridden (grader.requirements)
        self.thresholds: dict[str, float] = dict(thresholds or {})
        self.timeout = timeout
        # The grade's overall budget (seconds since ``started``, a time.monotonic() value): no run starts
        # once it is spent, and none runs past it (docs/reviewer.md, --budget).
        self.budget = budget
        start = time.monotonic() if started is None else started
        self.deadline = None if budget is None else start + budget
        self.timeouts: list[tuple[str, float]] = []  # (label, seconds) of every run that reached its timeout
        self.skipped: list[str] = []  # why runs were not made: the not-assessable reasons, for the notes
        # Set once the replay suite timed out: every other run of the suite is skipped or stopped.
        self._suite_hung = threading.Event()
        self._suite_hung_reason = ""
        self._suite_done = threading.Event()  # the replay suite's run ended, however it ended
        self.outputs: list[tuple[str, str]] = []
        self.sandbox_users: set[str] = set()  # RunResult.user of every run: "unprivileged" | "grader"
        self.disk_fills: list[str] = []  # a run of this submission's filled the workspace disk: for the notes
        # The folders each running run may write (path: its name in a note), keyed by the run's log folder.
        self._running: dict[str, dict[Path, str]] = {}
        self._replay: ReplayRun | None = None
        self._replay_error: NotAssessable | None = None
        self._runs = 0
        # Checks may run concurrently (--jobs): log names, scratch copies and the replay memo are shared.
        self._lock = threading.Lock()
        self._replay_lock = threading.Lock()
        self._probes: dict[str, Future[object]] = {}
        self._memo: dict[str, object] = {}
        self._memo_locks: dict[str, threading.Lock] = {}
        # Runs of submission code a check may have going at once (run_checks sets it from --jobs).
        self.jobs = 1
        self._logs = workspace.root / "logs"
        self._logs.mkdir(parents=True, exist_ok=True)
        self._roomy_at_start = self.has_room()

    def suite_command(self) -> SuiteCommand:
        """How the suite is run, from the pristine copy's Makefile or README: read once per grade (every
        probe's run of the suite uses it; a scratch copy's may have been rewritten)."""
        return self.memo("suite-command", lambda: suite_command(self.repo))

    def memo(self, name: str, make: Callable[[], T]) -> T:
        """``make()``'s value, made once for this grade however many checks ask at once (e.g. the tapes,
        which several checks read: held in memory once)."""
        with self._lock:
            lock = self._memo_locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._memo:
                self._memo[name] = make()
            return cast(T, self._memo[name])

    def memo_get(self, name: str) -> object | None:
        """The value `memo` made for ``name``, or None when nothing asked for it yet (never makes it)."""
        with self._lock:
            return self._memo.get(name)

    def start_probe(self, name: str, probe: Callable[[], object], *, background: bool = True) -> None:
        """Run ``probe`` once, in a background thread alongside the checks (``background=False``: now, in
        this thread); `probe_result` gives what it returned or raised either way."""
        with self._lock:
            if name in self._probes:
                return
            future: Future[object] = Future()
            self._probes[name] = future

        def work() -> None:
            try:
                future.set_result(probe())
            except BaseException as exc:  # handed to whoever waits: the check that needs the probe
                future.set_exception(exc)

        if background:
            threading.Thread(target=work, name=f"probe-{name}", daemon=True).start()
        else:
            work()

    def probe_result(self, name: str) -> object | None:
        """What a started probe returned (waits for it, re-raises its error); None if it was never started."""
        with self._lock:
            future = self._probes.get(name)
        return None if future is None else future.result()

    def wait_probe(self, name: str) -> None:
        """Wait for one started probe to end (its error is left to `probe_result`); no-op if never started."""
        with self._lock:
            future = self._probes.get(name)
        if future is not None:
            future.exception()

    def wait_probes(self) -> None:
        """Wait for every started probe (errors are left to `probe_result`): none outlives the checks."""
        with self._lock:
            futures = list(self._probes.values())
        for future in futures:
            future.exception()

    def has_room(self) -> bool:
        """The workspace disk has the room a grade expects (bytes and files): a check can be run again."""
        now = self._room()
        return now.bytes >= _ROOM and now.files >= _FILES_ROOM

    def wait_for_room(self) -> str | None:
        """Wait, at most one command timeout and never past the grade's budget, for the workspace disk to
        have room again (a neighbour's flood ends with its run, whose reclaim removes it); no wait when the
        disk was short of room when the grade began. None when it does not; else whose the disk was when
        the wait began, for the note."""
        whose = self._whose_fill()
        # A disk short of room from the start is not a flood that will end: no wait, only a look.
        limit = time.monotonic() + (self.timeout if self._roomy_at_start else 0.0)
        if self.deadline is not None:
            limit = min(limit, self.deadline)
        while not self.has_room():
            if time.monotonic() >= limit:
                return None
            time.sleep(0.5)
        return whose

    def _whose_fill(self) -> str:
        """How much of what is in use on the workspace disk this grade holds, in what ran out."""
        try:
            st = os.statvfs(self.workspace.root)
        except OSError:
            return ""
        grade = self._grade_held()
        if st.f_files and st.f_favail < _FILES_ROOM:
            used, held = f"{st.f_files - st.f_ffree:,} files", f"{grade.files:,}"
        else:
            used = diskwatch.size_text((st.f_blocks - st.f_bfree) * st.f_frsize)
            held = diskwatch.size_text(grade.bytes)
        mine = "at least " if not grade.complete else ""
        return f"this grade's workspace held {mine}{held} of the {used} in use"

    def forget_for_room(self) -> None:
        """Forget every probe and memo, and a replay run that failed for want of room, so that checks run
        again once the room is back make their runs anew (`grader.grading.run_checks`; red team 30). A
        replay run that did run is kept: it is evidence, whatever it did to the disk. Call it only when
        nothing runs (after `wait_probes`)."""
        with self._lock:
            self._probes.clear()
            self._memo.clear()
            self._memo_locks.clear()
        with self._replay_lock:
            if (
                self._replay_error is not None
                and self._pristine is not None
                and for_want_of_room(self._replay_error.reason)
            ):
                # The suite's first run may have left the checkout half-written: the next one gets a copy
                # (no room for it: the first reason stands).
                with contextlib.suppress(NotAssessable):
                    self.checkout = self.scratch_copy("replay")
                    self._replay_error = None

    def require_env(self) -> Env:
        """The installed environment, or NotAssessable with the install failure's reason."""
        if self.env is None:
            raise NotAssessable(self.install_error or "the submission's environment was not installed")
        return self.env

    @contextlib.contextmanager
    def _disk(self, doing: str) -> Iterator[None]:
        """The grader's own writes in the workspace: a full disk (ENOSPC) is NotAssessable, never a crash."""
        try:
            yield
        except OSError as exc:
            if no_space(exc):
                raise NotAssessable(
                    f"{no_space_reason('workspace', self.workspace.root)} ({doing})"
                ) from None
            raise

    def _free(self) -> int:
        try:
            return shutil.disk_usage(self.workspace.root).free
        except OSError:
            return _ROOM

    def _room(self) -> diskwatch.Room:
        """What the workspace disk has free (bytes and files); roomy values when it cannot be read."""
        return diskwatch.room(self.workspace.root) or diskwatch.Room(_ROOM, _FILES_ROOM)

    def _reclaim(
        self,
        cwd: Path,
        home: Path,
        logs: Mapping[Path, set[str]],
        label: str,
        before: diskwatch.Room,
        *,
        stopped: bool = False,
    ) -> None:
        """A run that left a roomy workspace disk nearly full (bytes or files) loses what it left behind, so
        that the grader's next copies have room: its home, what it added to its working folder (anything
        the pristine tree does not hold), and anything in its log folders but the logs the grader reads.

        Red team 10: a suite flooding the disk and leaving the flood in place made every later copy fail,
        and five rows, no-credentials among them, left the total as not assessable. Red team 30: the same
        with empty files (the disk's inodes, not its bytes) written into the working folder, which the
        home-only reclaim left in place. Nothing reads a run's home after it; a probe reading its working
        folder after a run that flooded the disk reads it without the flood. The report notes the fill."""
        after = self._room()
        floor = _floor(before) if stopped else None  # stopped for filling it: judged at its floor
        low = floor or diskwatch.Room(_ROOM, _FILES_ROOM)
        bytes_low = before.bytes >= low.bytes > after.bytes
        files_low = before.files >= low.files > after.files
        if not (bytes_low or files_low):
            return
        left = [home]
        if self._pristine is not None:
            left += _added(cwd, self._pristine)
        for folder, keep in logs.items():
            with contextlib.suppress(OSError):
                left += [folder / name for name in os.listdir(folder) if name not in keep]
        held = [_usage(path) for path in left]
        size, count = sum(h[0] for h in held), sum(h[1] for h in held)
        lost = diskwatch.Room(before.bytes - after.bytes, before.files - after.files)

        def most(bytes_: int, files: int) -> bool:
            return (bytes_low and 2 * bytes_ >= lost.bytes) or (files_low and 2 * files >= lost.files)

        # Its own doing only: at least half of what the disk lost is in what it left, or in this grade's
        # workspace (ten probes of one submission flooding at once each hold a tenth: red team 30). A
        # neighbour's flood is `_check_space`'s to judge, and the neighbour's own reclaim frees it.
        if not most(size, count):
            grade = self._grade_held()
            if grade.complete and not most(grade.bytes, grade.files):
                return
        for path in left:
            _discard(path)
        free = f"{diskwatch.size_text(after.bytes)} and {after.files:,} files free"
        what = f"{count:,} files, {diskwatch.size_text(size)}"
        note = (
            f"{label!r} left the workspace disk nearly full ({free}): what it left in its home, working "
            f"folder and log folders ({what}) was removed to go on"
        )
        with self._lock:
            if note not in self.disk_fills:
                self.disk_fills.append(note)

    def _grade_held(self) -> diskwatch.Held:
        """What this grade's workspace holds on its disk (capped: ``complete`` False past the cap)."""
        try:
            device = os.stat(self.workspace.root).st_dev
        except OSError:
            return diskwatch.Held(0, False)
        return diskwatch.held_by({self.workspace.root: "workspace"}, (), device)

    def _held(self) -> diskwatch.Held:
        """What this submission's running runs hold on the workspace disk right now (diskwatch.Watch)."""
        with self._lock:
            folders = {path: name for running in self._running.values() for path, name in running.items()}
        uids: set[int] = set()
        for path, name in folders.items():
            if name == "home":  # the sandbox hands a run's folders to its own uid while it runs
                with contextlib.suppress(OSError):
                    uids.add(path.stat().st_uid)
        uids.discard(os.getuid())
        try:
            device = os.stat(self.workspace.root).st_dev
        except OSError:
            return diskwatch.Held(0, False)
        return diskwatch.held_by(folders, uids, device)

    def _check_space(self, result: RunResult, watch: diskwatch.Watch, label: str) -> None:
        """NotAssessable when the run failed for lack of room the grader should have had (docs/security.md).

        On a disk that started the run with less than ``_ROOM`` free: when the disk was full while the run
        ran or after it, or the run says so. With more room, only when the disk went full while the run ran
        and this submission's running folders held less than half of what the disk lost (a neighbour's
        flood, red-team R11); a fill that is the submission's own is graded as it ran, with a note.
        """
        if watch.before.bytes < _ROOM or watch.before.files < _FILES_ROOM:
            # full at any sample, not only at the end: a neighbour's flood may be gone by then (R11)
            now = self._room()
            full = min(watch.min_free, now.bytes) < _FULL or min(watch.min_files, now.files) < _FILES_FULL
            if full or no_space_text(f"{result.stdout}\n{result.stderr}"):
                where = no_space_reason("workspace", self.workspace.root)
                raise NotAssessable(f"{where} (running {label!r})")
            return
        fill = watch.fill
        if fill is None:
            return  # never full, or full but never measured steadily: graded as it ran
        before = fill.amount(fill.free_before)
        lowest = fill.amount(min(watch.min_files if fill.files else watch.min_free, fill.free_at))
        held = fill.amount(fill.held.files if fill.files else fill.held.bytes)
        if fill.own:
            note = (
                f"this run filled the workspace disk ({before} free → {lowest}): {held} in its "
                f"{fill.held.biggest or 'folders'} ({label!r})"
            )
            with self._lock:
                if note not in self.disk_fills:
                    self.disk_fills.append(note)
            return
        raise NotAssessable(
            f"{_FILLED_UNDER}, and not with this run's files: {before} free → "
            f"{lowest}, this run held {held} (running {label!r}; another candidate graded beside it?)"
        )

    def log_path(self, label: str, suffix: str) -> Path:
        """A fresh file path outside the repo for a log one run writes (audit, results, JUnit, misses).

        The run sees the path (its folder is bound into the sandbox, named in a variable and listed in
        ``/proc/self/mountinfo``), so nothing in it tells one run from another (docs/security.md): a random
        folder name and the same file name ``run<suffix>`` for every run. ``logs/index.tsv``, which no run
        sees, says which folder holds which run's logs.
        """
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-") or "run"
        with self._lock:
            self._runs += 1
            # One folder per log: the sandbox hands a log's folder to the sandbox user for the run and takes
            # it back after, so two runs at once (--jobs) must never share a folder.
            folder = _fresh(self._logs)
            with open(self._logs / "index.tsv", "a", encoding="utf-8") as index:
                index.write(f"{folder.name}\t{self._runs:02d}-{safe}{suffix}\n")
            return folder / f"run{suffix}"

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        loopback: bool = False,
        label: str = "",
        pass_fds: Sequence[int] = (),
        suite_probe: bool = False,
        network: bool = False,
        netns_helpers: Sequence[Sequence[str]] = (),
        overlays: Mapping[str, Path] | None = None,
        watch: Callable[[int, bytes], None] | None = None,
    ) -> tuple[RunResult, AuditLog]:
        """Run `argv` in the sandbox with the submission's venv, no network and no credentials.

        Within the grade's budget: NotAssessable when it is spent, or when it ran out during this run.
        ``network``: the host's network (only `grade drift` against a live endpoint URL asks for it).
        ``suite_probe``: the command runs the suite again (a rerun, a record command that runs it); once the
        replay suite timed out it is skipped, or stopped if already running (NotAssessable).
        ``netns_helpers``, ``overlays``: grader helpers beside the run, files shown over system files
        (`grader.sandbox.run`); ``watch``: sees everything the command prints (`grader.sandbox.run`).
        """
        if suite_probe and self._suite_hung.is_set():
            raise self.skip(self._suite_hung_reason)
        self.require_env()
        label = label or " ".join(argv)
        allowed = self.timeout if timeout is None else timeout
        if suite_probe and not self._suite_done.is_set():
            # Started alongside the replay suite (--jobs 2): whether the suite hangs is for the replay suite
            # to find out (it stops this run when it times out); the grace keeps this run from reaching
            # its own timeout first, which would make a hanging suite cost two timeouts.
            allowed += max(10.0, allowed / 2)
        clipped = False
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left < 1.0:
                spent = f"the grade's budget of {self.budget:g} s was spent"
                raise self.skip(f"not run: {spent} before {label!r}")
            if left < allowed:
                allowed, clipped = left, True
        # No cwd: a fresh copy of the pristine tree, never the checkout an earlier run may have rewritten.
        cwd = cwd or self.scratch_copy(label)
        with self._in_place(cwd) as cwd:
            return self._run(
                argv,
                cwd,
                env,
                label,
                allowed,
                clipped,
                pass_fds,
                suite_probe,
                loopback,
                network,
                netns_helpers,
                overlays,
                printed=watch,
            )

    @contextlib.contextmanager
    def _in_place(self, cwd: Path) -> Iterator[Path]:
        """Where the run sees its folder: scratch copies as they are; the checkout moved for the run to a
        path shaped like theirs (``scratch/<random>/repo``) and back after, so that no path a run can see
        (its working folder, ``/proc/self/mountinfo``) tells the replay suite from a probe."""
        if Path(cwd) != self.checkout:
            yield cwd
            return
        with self._lock:
            alias = _fresh(self.workspace.root / "scratch") / "repo"
        os.rename(self.checkout, alias)
        try:
            yield alias
        finally:
            os.rename(alias, self.checkout)
            with contextlib.suppress(OSError):
                alias.parent.rmdir()

    def _run(
        self,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str] | None,
        label: str,
        allowed: float,
        clipped: bool,
        pass_fds: Sequence[int],
        suite_probe: bool,
        loopback: bool,
        network: bool,
        netns_helpers: Sequence[Sequence[str]] = (),
        overlays: Mapping[str, Path] | None = None,
        printed: Callable[[int, bytes], None] | None = None,
    ) -> tuple[RunResult, AuditLog]:

        venv = self.require_env().venv
        startup, _sealed = self._guard_files()
        audit_log = self.log_path(label, ".audit.jsonl")
        home = self._logs.parent / "home" / audit_log.parent.name
        # Nothing of the submission's is importable at start-up: the grader's sitecustomize (first and only
        # on PYTHONPATH) appends its tree to sys.path after the standard library and the venv's packages.
        extra = {
            "PYTHONPATH": str(startup),
            "PYTHONSAFEPATH": "1",
            "PYTHONNOUSERSITE": "1",
            "PY_SOURCE_PATH": _pythonpath(cwd, self.env.import_roots if self.env else ()),
            **(env or {}),
        }
        owned = sandbox.owned_folders(cwd=cwd, home=home, env=extra, audit_log=audit_log)
        names = {cwd: "working folder", home: "home"}
        key = audit_log.parent.name
        with self._lock:
            self._running[key] = {path: names.get(path, "log folder") for path in owned}
        room_before = self._room()
        flooding = threading.Event()
        watch = diskwatch.Watch(
            self.workspace.root,
            room_before,
            _FULL,
            _FILES_FULL,
            self._held,
            floor=_floor(room_before),
            stop=flooding,
        )
        try:
            with self._disk(f"running {label!r}"), watch:
                home.mkdir(parents=True, exist_ok=True)
                result = sandbox.run(
                    list(argv),
                    cwd=cwd,
                    home=home,
                    timeout=allowed,
                    venv=venv,
                    env=extra,
                    network=network,
                    loopback=loopback,
                    audit_log=audit_log,
                    audit_root=cwd,
                    pass_fds=pass_fds,
                    stop=_AnyOf(flooding, self._suite_hung if suite_probe else None),
                    netns_helpers=netns_helpers,
                    overlays=overlays,
                    watch=printed,
                )
        finally:
            with self._lock:
                self._running.pop(key, None)
        logs: dict[Path, set[str]] = {}
        named = [Path(v) for k, v in extra.items() if k.endswith("_LOG") and os.path.isabs(v)]
        for path in [audit_log, *named]:
            logs.setdefault(path.parent, set()).add(path.name)
        logs = {f: names for f, names in logs.items() if f in owned}
        if result.stopped and flooding.is_set() and watch.stopped_at is not None:
            # Its own flood, stopped where it would have left the grader and its neighbours no room (red
            # team 30): graded as it ran, a failure it caused, like a memory limit's kill.
            stopped = watch.stopped_at
            result.stopped, result.returncode = False, _KILLED
            was, now = stopped.amount(stopped.free_before), stopped.amount(stopped.free_at)
            why = (
                f"this run was stopped: it was filling the workspace disk ({was} free → {now}, "
                f"{stopped.amount(_held_amount(stopped))} in its {stopped.held.biggest or 'folders'})"
            )
            result.stderr = f"{result.stderr}\n[grader] {why}\n"
            with self._lock:
                self.disk_fills.append(f"{why} ({label!r})")
        if result.stopped:
            self._reclaim(cwd, home, logs, label, room_before)
            raise self.skip(self._suite_hung_reason)
        if result.timed_out and clipped:
            raise self.skip(f"not finished: the grade's budget of {self.budget:g} s ran out during {label!r}")
        if result.timed_out:
            with self._lock:
                self.timeouts.append((label, allowed))
        self.outputs.append((label, f"{result.stdout}\n{result.stderr}"))
        self.sandbox_users.add(result.user)
        self._reclaim(cwd, home, logs, label, room_before, stopped=watch.stopped_at is not None)
        self._check_space(result, watch, label)
        return result, read_audit_log(audit_log)

    def skip(self, reason: str) -> NotAssessable:
        """The NotAssessable for a run the grader did not make (or stopped), remembered for the notes."""
        with self._lock:
            if reason not in self.skipped:
                self.skipped.append(reason)
        return NotAssessable(reason)

    def replay_run(self) -> ReplayRun:
        """The replay suite (`make test` when the Makefile has it, else `python -m pytest`), run once."""
        with self._replay_lock:
            if self._replay_error is not None:
                raise self._replay_error
            if self._replay is None:
                try:
                    self._replay = self._verified_replay()
                except NotAssessable as exc:
                    self._replay_error = exc  # every check that needs the suite gets the same reason
                    raise
            return self._replay

    def _verified_replay(self) -> ReplayRun:
        # Never trust one run: outcome hooks found statically -> rerun without conftest files; tests skipped,
        # xfail(run=False) or reported passed after raising -> rerun with their skip/xfail marks stripped.
        # Start-up files (sitecustomize.py) found statically -> rerun in a clean interpreter. Every rerun
        # gets a fresh copy of the pristine tree: the first run may have rewritten or deleted tests in the
        # checkout so that a rerun there would find nothing to contradict it.
        rr = self.run_suite(self.checkout, label="replay", primary=True)
        rr.scan = tamper.scan(self.repo)  # the pristine copy: what was submitted, not what the run left
        if rr.run.timed_out:
            return rr
        wrapped = rr.guard is not None and bool(rr.guard.wrapped)
        if rr.scan.outcome_hooks or (rr.guard is not None and rr.guard.rewritten) or wrapped:
            copy = self.scratch_copy("replay-noconftest")
            rr.noconftest = self.run_suite(copy, label="replay-noconftest", noconftest=True)
            again = rr.noconftest.guard
            if again is not None and again.wrapped:
                copy = self.scratch_copy("replay-hookless")
                rr.hookless = self.run_suite(copy, label="replay-hookless", noconftest=True, clean=True)
            if _errored_without_conftest(rr):
                copy = self.scratch_copy("replay-unhooked")
                rr.unhooked = self.run_suite(copy, label="replay-unhooked", unhooked=True)
        guard = rr.guard
        if guard is not None and (guard.skipped or guard.notrun or guard.count("xfailed")):
            copy = self.scratch_copy("replay-unskipped")
            rr.unskipped = self.run_suite(copy, label="replay-unskipped", unskip=True)
        if rr.scan.startup_hooks:
            rr.clean = self.run_suite(self.scratch_copy("replay-clean"), label="replay-clean", clean=True)
        suite = self.suite_command()
        narrowed = suite.narrowed
        changed = tests_the_run_changed(self.repo, self.checkout)
        rr.changed_tests = changed
        if changed:
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            why = f"the suite's run deleted or rewrote its own test files ({', '.join(changed[:3])}{more})"
            narrowed = whole_suite_because(narrowed, why, suite.plain)
        if narrowed is None and guard is not None and guard.deselected:
            # Red team 5, G5: deselected by a way the grader does not read (an @file, a plugin, a hook).
            why = f"{guard.deselected} tests were deselected in the suite's run"
            narrowed = whole_suite_because(None, why, suite.plain)
        if narrowed is None and guard is not None and guard.narrowed:
            # Red team 15: the suite's own code changed what pytest collects (a conftest's configure hook).
            why = f"the suite's own code changed what pytest was asked to collect ({guard.narrowed})"
            narrowed = whole_suite_because(None, why, suite.plain)
        if guard is not None and guard.optimized:
            # Red team 31: `python -O -m pytest --assert=plain` (or PYTHONOPTIMIZE) compiles every assert
            # out, so a failing test passes. The whole-suite run is a plain interpreter's.
            rr.optimized = True
            why = (
                f"the suite's run had Python's optimizations on (-O, level {guard.optimized}): "
                "its assert statements were compiled out"
            )
            narrowed = whole_suite_because(narrowed, why, suite.plain)
        hidden = [*rr.scan.shadowed, *rr.scan.look_alike_files, *rr.scan.unentered]
        if hidden:
            # Red team 20, F1 and 25, F3-F5: tests deleted, redefined or written so that pytest passes over
            # them; the copy brings them back.
            # A hidden file, or a file in a folder pytest skips (`unentered` lists folders).
            folders = tuple(f"{rel}/" for rel in rr.scan.unentered)
            files = [h.location for h in rr.scan.hooks if h.kind == "collection"]
            hiding = [at for at in files if at.split(":")[0] in hidden or at.startswith(folders)]
            where = ", ".join(hiding)[:200]
            why = (
                "test modules delete or redefine tests, replace their code, or keep pytest from collecting "
                f"them ({where})"
            )
            narrowed = whole_suite_because(narrowed, why, suite.plain)
        if narrowed is not None and guard is not None:
            copy = self.scratch_copy("replay-whole")
            revived = [rel for rel in rr.scan.shadowed if unshadow.revive(copy, rel)]
            # A test whose code was swapped keeps its id: it ran in the suite, other code under its name.
            rr.changed_tests = [*rr.changed_tests, *revived]
            # After `revive`: a look-alike file's own hidden tests come back under its ASCII name too.
            for rel in rr.scan.look_alike_files:
                renamed = unshadow.revive_file_name(copy, rel)
                if renamed is not None:
                    revived.append(renamed)
                    rr.renamed[renamed] = rel
            for rel in rr.scan.unentered:
                if (entered := unshadow.enter_folder(copy, rel)) is not None:
                    rr.renamed[f"{entered}/"] = f"{rel}/"
            rr.whole = self.run_suite(
                copy, label="replay-whole", whole=narrowed, read_only=changed, as_copied=revived
            )
            rr.left_out_because = narrowed.why
        return rr

    def _guard_files(self) -> tuple[Path, Path]:
        """(folder holding the guard plugin, sealed folder for its logs): grader-owned, never chowned."""
        plugins = self._logs.parent / "pysite"
        sealed = self._logs.parent / "sealed"
        with self._lock, self._disk("writing the guard plugin"):
            if not (plugins / f"{tamper.GUARD_MODULE}.py").is_file():
                tamper.write_guard(plugins)
            sealed.mkdir(mode=0o700, exist_ok=True)
        return plugins, sealed

    def run_suite(
        self,
        cwd: Path,
        *,
        label: str = "suite",
        noconftest: bool = False,
        unhooked: bool = False,
        unskip: bool = False,
        clean: bool = False,
        primary: bool = False,
        whole: WholeSuite | None = None,
        read_only: Sequence[str] = (),
        as_copied: Sequence[str] = (),
    ) -> ReplayRun:
        """Run the suite as `replay_run` does, in another checkout (e.g. a scratch copy); not memoized.

        ``read_only``: files of the checkout (relative) the run is shown read-only, as submitted (the
        pristine copy's), so code that rewrote them in the suite's own run cannot rewrite them again
        (red team 4, F8c: a package whose import rewrites a test's assertion). Needs bubblewrap.
        ``as_copied``: more files shown read-only, as ``cwd`` holds them (a copy the grader rewrote).

        ``noconftest`` runs without the submission's hooks: ``--noconftest``, its configuration's ``addopts``
        overridden (no ``-p`` plugin of its own); ``unhooked`` keeps them for their fixtures and has the
        guard unregister every plugin holding a hook of the submission's once a test's fixtures are set up;
        ``unskip`` makes the guard strip skip/skipif/xfail marks;
        ``clean`` runs pytest itself (not `make test`) in ``python -I -B`` through the grader's launcher,
        so no start-up file, ``PYTHON*`` variable or Makefile of the submission's runs before the guard.
        ``whole`` runs pytest that way over every test the repository holds (the command's own options and
        variable assignments kept, its paths and ignore/deselect options dropped).
        ``primary``: the replay suite itself. Once it has timed out, every other run of the suite (a
        probe) is skipped, or stopped if it is running (NotAssessable): a hanging suite costs one timeout.
        """
        venv = self.require_env().venv
        # Which command: from the pristine copy's Makefile or README (``cwd``'s may have been rewritten).
        suite = self.suite_command()
        command = list(suite.argv)
        # One folder for the run's logs (the result log's, which the sandbox hands over as a *_LOG folder):
        # JUnit and pytest's cache are written there too.
        results_log = self.log_path(label, ".results.jsonl")
        junit = results_log.parent / "run.junit.xml"
        misses = results_log.parent / "run.misses.jsonl"
        plugins = [m for m in pytest_plugin_modules(venv) if m not in _GRADER_PLUGINS]
        if noconftest:
            # A plugin the project registers for itself (a pytest11 entry point into its own tree) is its
            # hook like a conftest file (red-team R8); the venv's plugins from the index stay.
            plugins = [m for m in plugins if not tamper.in_tree(self.repo, m)]
        guard_dir, sealed = self._guard_files()
        guard_log = sealed / f"{results_log.parent.name}.guard"
        addopts = [
            *(arg for m in (*_GRADER_PLUGINS, tamper.GUARD_MODULE, *plugins) for arg in ("-p", m)),
            *(["--noconftest", "-o", "addopts="] if noconftest else []),
            "--disable-socket",
            "--allow-unix-socket",
            # Python's own tracebacks: pytest's long ones (source and locals of every frame) cost a probe run
            # whose tests all fail (tapes withheld, messages re-worded) three times the suite's own run. The
            # same in every run, so none looks like a probe; the suite's command line can still ask for more.
            "--tb=native",
            f"--junitxml={junit}",
            # Keep .pytest_cache out of the checkout: the secret and hygiene scans read the tree afterwards.
            "-o",
            f"cache_dir={junit.with_suffix('.cache')}",
        ]
        env = {
            # pytest splits PYTEST_ADDOPTS with shlex: quote, since the workspace path may hold spaces.
            "PYTEST_ADDOPTS": shlex.join(addopts),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTEST_RESULT_LOG": str(results_log),
            "CASSETTE_MISS_LOG": str(misses),
            "CASSETTE_MODE": "replay",
        }
        if clean or whole is not None:
            command = ["python", "-I", "-B", str(guard_dir / tamper.CLEAN_LAUNCHER)]
        if whole is not None:
            command += whole.args
            env = {**whole.env, **env, "PYTEST_RUN_ALL": "1"}
        # The guard writes through this descriptor: its file sits in a 0700 folder the sandbox user
        # cannot open by path, so a test cannot rewrite it afterwards (docs/security.md).
        nonce = secrets.token_hex(16)
        with self._disk("opening the guard log"):
            fd = os.open(guard_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        run: RunResult | None = None
        try:
            env["PYTEST_REPORT_FD"] = str(fd)
            env["PYTEST_REPORT_NONCE"] = nonce
            if unskip:
                env["PYTEST_RUN_SKIPPED"] = "1"
            if unhooked:
                env["PYTEST_RUN_UNHOOKED"] = "1"
            shown = {str(cwd / rel): self.repo / rel for rel in read_only if (self.repo / rel).is_file()}
            shown.update({str(cwd / rel): cwd / rel for rel in as_copied})
            run, audit = self.run(
                command,
                cwd=cwd,
                env=env,
                label=label,
                pass_fds=(fd,),
                suite_probe=not primary,
                overlays=shown or None,
            )
        finally:
            os.close(fd)
            if primary and run is not None and run.timed_out:  # hung first, then done: no probe slips by
                self._suite_hung_reason = (
                    f"not run: the replay suite timed out after {run.duration:.0f} s, "
                    "so the probes that run the suite again were skipped or stopped"
                )
                self._suite_hung.set()
            if primary:
                self._suite_done.set()
        assert run is not None  # self.run either returned or raised
        guard = tamper.read_guard(guard_log, nonce)
        logged = read_result_log(results_log)
        # JUnit is the fallback when the grader's plugin never wrote (e.g. pytest crashed loading it).
        fallback = logged if logged.records else read_junit(junit)
        results = _guard_results(guard, fallback) if guard.records else fallback
        mismatch = _mismatch(guard, logged) if guard.records else ""
        # The run owned its log folders: a log replaced by a link, a FIFO or a device was not read, and
        # is tamper evidence like a forged line.
        replaced = "; ".join(x for x in (audit.unsafe, logged.unsafe, _unsafe(junit), _unsafe(misses)) if x)
        if replaced:
            mismatch = "; ".join(x for x in (mismatch, f"the grader's logs were replaced: {replaced}") if x)
        return ReplayRun(
            command=command,
            how=suite.how,
            run=run,
            results=results,
            audit=audit,
            junit=junit if is_regular(junit) else None,
            misses=_read_jsonl(misses),
            blocked=_socket_refusals(junit),
            guard=guard if guard.records else None,
            log_mismatch=mismatch,
        )

    def keep_pristine(self) -> bool:
        """Make sure the pristine copy exists; `acquire` normally made it (`Workspace.pristine`).

        For a workspace made without one, copy the checkout now (call before any run) and point ``repo``
        at the copy. Every `scratch_copy` is made from it: a probe sees the submission as it was submitted,
        not as an earlier run left the checkout. False when the copy could not be made (e.g. no room).
        """
        if self._pristine is not None:
            return True
        try:
            self._pristine = keep_pristine(self.checkout, self.workspace.root / "pristine")
        except OSError:
            return False
        self.repo = self._pristine
        return True

    def scratch_copy_without(
        self, name: str, folder: Path, leave_out: Callable[[Path], bool]
    ) -> tuple[Path, int]:
        """`scratch_copy`, less the files under the repo-relative ``folder`` that ``leave_out`` names:
        (the copy, how many were left out). A probe that withholds 10,000 tapes never copies them."""
        return self._scratch(name, (Path(folder), leave_out))

    def scratch_copy(self, name: str) -> Path:
        """A throwaway copy of the repo (history included) for probes that mutate files.

        Made from the copy `keep_pristine` kept, else (nothing kept) from the checkout itself.
        """
        return self._scratch(name, None)[0]

    def _scratch(self, name: str, leave_out: tuple[Path, Callable[[Path], bool]] | None) -> tuple[Path, int]:
        # `scratch/<random>/repo` for every copy, whatever it is for: the run sees the path (its working
        # folder, /proc/self/mountinfo) and must not learn from it which probe it is (docs/security.md).
        with self._lock, self._disk(f"copying the repo for {name!r}"):
            dest = _fresh(self.workspace.root / "scratch") / "repo"
            dest.mkdir()
        with self._disk(f"copying the repo for {name!r}"):
            source = self._pristine or self.checkout
            if leave_out is None:
                _copy_tree(source, dest)
                left = 0
            else:
                left = _copy_tree_without(source, dest, *leave_out)
            dest.chmod(0o755)  # cp -a gave it the pristine copy's 0700; the run's user gets it by chown
            return dest, left


_copy_tree = copy_checkout  # the name tests and older callers use


def _fresh(base: Path) -> Path:
    """A new folder in ``base`` with a random name (a run sees it: no label, no counter)."""
    base.mkdir(parents=True, exist_ok=True)
    while True:
        folder = base / secrets.token_hex(6)
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder


def _unsafe(path: Path) -> str:
    """Why a log the run could replace was not read ("" when it is absent or a regular file)."""
    try:
        read_bytes(path, cap=0, truncate=True)
    except UnsafeFile as exc:
        return f"{path.name}: {exc.strerror}"
    except OSError:
        pass
    return ""


def _read_log(path: Path) -> bytes | None:
    """A log the run wrote, read safely (grader/safeio.py): None when absent, replaced or unreadable."""
    try:
        return read_bytes(path, cap=_LOG_CAP, truncate=True)
    except OSError:
        return None


def _copy_tree_without(source: Path, dest: Path, folder: Path, leave_out: Callable[[Path], bool]) -> int:
    """`_copy_tree`, except the files under ``folder`` (relative) for which ``leave_out`` is true.

    Everything beside the path down to ``folder`` goes through `_copy_tree` (cp); only ``folder`` itself is
    walked here. A ``folder`` that is missing, climbs out, or has a link on its path is copied as it is
    (nothing left out). Returns how many files were left out.
    """
    parts = folder.parts
    here = source
    for part in parts:
        here = here / part
        if folder.is_absolute() or part in ("", ".", "..") or here.is_symlink() or not here.is_dir():
            _copy_tree(source, dest)
            return 0
    src, dst = source, dest
    for part in parts:
        _copy_entries([src / entry for entry in sorted(os.listdir(src)) if entry != part], dst)
        src, dst = src / part, dst / part
        dst.mkdir()
        shutil.copystat(src, dst)
    left: list[int] = [0]

    def ignore(where: str, names: list[str]) -> list[str]:
        skipped = [n for n in names if not _real_dir(os.path.join(where, n)) and leave_out(Path(where, n))]
        left[0] += len(skipped)
        return skipped

    shutil.copytree(src, dst, symlinks=True, ignore=ignore, dirs_exist_ok=True)
    return left[0]


def _real_dir(path: str) -> bool:
    return os.path.isdir(path) and not os.path.islink(path)


def _copy_entries(paths: list[Path], dest: Path) -> None:
    """Copy each of ``paths`` into ``dest`` (one cp for all of them; links stay links)."""
    if not paths:
        return
    try:
        argv = ["cp", "-a", "--", *map(str, paths), str(dest)]
        code = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False).returncode
    except OSError:
        code = None
    if code == 0:
        return
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.copytree(path, dest / path.name, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(path, dest / path.name, follow_symlinks=False)


def _guard_results(guard: tamper.GuardLog, fallback: Results | None) -> Results:
    """Counts from the guard's log (the one a test cannot reach by path); first failures from either log."""
    res = Results(
        passed=guard.count("passed"),
        failed=guard.count("failed"),
        errors=guard.count("error"),
        skipped=guard.count("skipped"),
        xfailed=guard.count("xfailed"),
        xpassed=guard.count("xpassed"),
        deselected=guard.deselected,
        exitstatus=guard.exitstatus,
        records=guard.records,
    )
    res.first_failures = [f"{nodeid} ({where})" for nodeid, where in guard.messages.items()][
        :_MAX_FIRST_FAILURES
    ]
    if fallback is not None and fallback.first_failures and not guard.rewritten:
        res.first_failures = list(fallback.first_failures)
    return res


def _mismatch(guard: tamper.GuardLog, logged: Results) -> str:
    """Why the submission-writable result log cannot be the guard's view of the same run ("" when it is)."""
    if guard.foreign:
        return f"{guard.foreign} lines in the grader's guard log were not written by the guard"
    if not logged.records:
        return ""
    # A check that failed after its test's call ended is the guard's own finding: pytest never reported it.
    mine = tuple(guard.count(outcome, late=False) for outcome in ("passed", "failed", "error"))
    theirs = (logged.passed, logged.failed, logged.errors)
    if mine != theirs:
        return (
            f"the result log the suite could write says {theirs[0]} passed, {theirs[1]} failed, "
            f"{theirs[2]} errors; the guard saw {mine[0]} passed, {mine[1]} failed, {mine[2]} errors"
        )
    return ""


def _pythonpath(cwd: Path, roots: Sequence[str] = ()) -> str:
    # The venv is cached across checkouts, so the submission is imported from its tree: at the folders its
    # editable install named (grader.install: Env.import_roots), else its src/ layout, then its root.
    parts = [str(cwd / root) for root in roots if root not in ("", ".")]
    if not parts and (cwd / "src").is_dir():
        parts.append(str(cwd / "src"))
    return os.pathsep.join(dict.fromkeys([*parts, str(cwd)]))


_KILLED = 128 + 9  # a shell's exit status for a command killed by SIGKILL


class _AnyOf(threading.Event):
    """Set when any of ``events`` is (the sandbox polls ``is_set`` to stop a run)."""

    def __init__(self, *events: threading.Event | None) -> None:
        super().__init__()
        self._events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self._events)


def _floor(before: diskwatch.Room) -> diskwatch.Room | None:
    """Room below which a run filling the workspace disk with its own files is stopped: a quarter of what
    it found free, and never below the room a grade needs; none on a disk that had little to start with
    (there a full disk is the grader's: `Context._check_space`)."""
    if before.bytes < 2 * _ROOM or before.files < 2 * _FILES_ROOM:
        return None
    return diskwatch.Room(max(_ROOM, before.bytes // 4), max(_FILES_ROOM, before.files // 4))


def _held_amount(fill: diskwatch.Fill) -> int:
    return fill.held.files if fill.files else fill.held.bytes


def for_want_of_room(reason: str) -> bool:
    """Whether a not-assessable reason is the workspace disk's being full (`no_space_reason`, or a run the
    disk filled under: `Context._check_space`), wherever in the reason a check quotes it. Read from the
    grader's own text; a submission that gets these words into a reason only gets its check run once more."""
    return "no space left on device: workspace" in reason or _FILLED_UNDER in reason


def _added(cwd: Path, pristine: Path) -> list[Path]:
    """The topmost entries of ``cwd`` that ``pristine`` does not hold at the same path (what a run added to
    its copy of the tree), walked without following a link or recursing; a folder both hold is entered, and
    a folder where the pristine tree holds something else (a test file the run turned into a folder of
    files) is added whole."""
    added: list[Path] = []
    stack = [Path()]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(cwd / rel) as entries:
                for entry in entries:
                    sub = rel / entry.name
                    try:
                        there = os.lstat(pristine / sub)
                    except OSError:
                        added.append(cwd / sub)
                        continue
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            if stat.S_ISDIR(there.st_mode):
                                stack.append(sub)
                            else:
                                added.append(cwd / sub)
        except OSError:
            continue
    return added


def _discard(path: Path) -> None:
    """Remove ``path`` (a folder with all it holds; a link itself, never what it points to)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            remove_tree(path)
        else:
            path.unlink()
    except OSError:
        pass


def _usage(folder: Path) -> tuple[int, int]:
    """(bytes, files) of ``folder`` and all under it (1 file for the folder itself, or ``folder`` being a
    file), walked without following a link or recursing."""
    try:
        top = os.lstat(folder)
    except OSError:
        return 0, 0
    if not stat.S_ISDIR(top.st_mode):
        return top.st_blocks * 512, 1
    size, count = 0, 1
    stack = [str(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    count += 1
                    with contextlib.suppress(OSError):
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            size += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            continue
    return size, count


def makefile_targets(repo: Path) -> set[str]:
    """Explicit target names of the repo's Makefile, read statically (no make run)."""
    return set(makefile_target_lines(repo))


def _errored_without_conftest(rr: ReplayRun) -> bool:
    """Whether a test that passed in the suite's run errored in the rerun without conftest files: it needs a
    conftest fixture, so that rerun said nothing about it (red team 23, F3)."""
    if rr.guard is None or rr.noconftest is None or rr.noconftest.guard is None:
        return False
    again = rr.noconftest.guard.outcomes
    return any(o == "passed" and again.get(t) == "error" for t, o in rr.guard.outcomes.items())


def makefile_target_lines(repo: Path) -> dict[str, str]:
    """Each explicit target of the repo's Makefile -> where its rule starts (``Makefile:18``), read
    statically (no make run); the first rule line of a target that has several."""
    for name in _MAKEFILES:
        try:
            raw = read_bytes(repo / name, cap=_MAKEFILE_CAP, truncate=True)
        except OSError:  # absent, a link, a FIFO: make would read another one (or none)
            continue
        break
    else:
        return {}
    text = raw.decode("utf-8", errors="replace")
    targets: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line[0] in "\t #" or "=" in line.split(":", 1)[0]:
            continue
        match = _TARGET_LINE.match(line)
        if match:
            for target in match.group(1).split():
                if not target.startswith("."):
                    targets.setdefault(target, f"{name}:{number}")
    return targets


def pytest_plugin_modules(venv: Path) -> list[str]:
    """Modules of every `pytest11` entry point in `venv`, read by `importlib.metadata` from the dist-info
    files of its site-packages (metadata only: nothing of the venv is imported or run)."""
    paths = [str(p) for p in sorted(venv.glob("lib/python*/site-packages"))]
    found: list[tuple[str, str]] = []
    for dist in metadata.distributions(path=paths):
        try:
            points = dist.entry_points.select(group="pytest11")
        except (OSError, UnicodeDecodeError, ValueError):  # an unreadable or malformed entry_points.txt
            continue
        found += [(dist.name or "", point.value) for point in points]  # sorted: a stable -p order
    modules: list[str] = []
    for _name, value in sorted(found):
        module = value.split(":", 1)[0].split("[", 1)[0].strip()
        if _MODULE.fullmatch(module) and module not in modules:
            modules.append(module)
    return modules


def _read_jsonl(path: Path) -> list[dict[str, object]]:
    raw = _read_log(path)
    if raw is None:
        return []
    out: list[dict[str, object]] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def _first_line(text: object) -> str:
    for line in str(text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def read_junit(path: Path) -> Results | None:
    """Fallback counts from the JUnit file pytest wrote at the grader's path."""
    root = _junit_root(path)
    if root is None:
        return None
    res = Results()
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
        if skipped is not None:
            if skipped.get("type") == "pytest.xfail":
                res.xfailed += 1
            else:
                res.skipped += 1
            continue
        problem = failure if failure is not None else error
        if problem is None:
            res.passed += 1
            continue
        if failure is not None:
            res.failed += 1
        if error is not None:
            res.errors += 1
        if len(res.first_failures) < _MAX_FIRST_FAILURES:
            res.first_failures.append(f"{name} (?): {_first_line(problem.get('message'))}")
    res.records = res.passed + res.failed + res.errors + res.skipped + res.xfailed
    return res if res.records else None


def _junit_root(path: Path) -> ET.Element | None:
    raw = _read_log(path)
    if raw is None:
        return None
    try:
        # The suite's process wrote it (and could have written anything): entity declarations (a billion
        # laughs) and external references are refused, and the size is capped.
        return defused_fromstring(raw)
    except (ET.ParseError, DefusedXmlException):
        return None


def _socket_refusals(junit: Path) -> list[tuple[str, str]]:
    """(file:line, what) for each test pytest-socket stopped, from the grader's JUnit file.

    pytest-socket raises before the socket exists, so the audit hook never sees these attempts; the
    traceback's innermost frame inside the repository is the line that tried to connect.
    """
    root = _junit_root(junit)
    if root is None:
        return []
    out: list[tuple[str, str]] = []
    for case in root.iter("testcase"):
        for problem in (case.find("failure"), case.find("error")):
            if problem is None:
                continue
            text = f"{problem.get('message') or ''}\n{problem.text or ''}"
            if "SocketBlockedError" not in text:
                continue
            frames = [
                f"{m.group('file')}:{m.group('line')}"
                for m in _FRAME.finditer(problem.text or "")
                if not m.group("file").startswith(("/", ".."))
            ]
            guess = (case.get("classname") or "?").replace(".", "/") + ".py"
            where = frames[-1] if frames else guess
            target = _BLOCKED_ARGS.search(problem.text or "")
            what = "socket refused by pytest-socket"
            if target:
                what += f" ({target.group('host')}:{target.group('port')})"
            out.append((where, what))
    return out
