"""The per-submission venv: the submission's vetted dependencies plus the grader's pinned tools, cached.

The only step with network, and an untrusted one (docs/security.md, "Installing"):

* The installer only ever sees requirements ``grader.requirements`` parsed itself; options, paths and URLs
  are refused there with a ``file:line``, and a line that is not a requirement is the submission's failure
  (`InstallFailed`) before any installer runs.
* Every installer command runs through ``grader.sandbox``. The first attempt installs wheels only
  (``--no-build``): no code of any package runs, only the grader's installer, which may fill the shared
  download cache. Only if that fails does a second attempt allow building source distributions, with a
  private, throw-away cache: a package's build code runs as the sandbox user and can write the venv being
  built, never the shared cache, another venv or the grader's files.
* A finished venv is recorded outside it (``<key>.json``: tool versions, a digest of every file, mode and
  owner, and every entry's status) and verified before each reuse (the status first, the digest when any
  status moved); a venv that no longer matches its record is rebuilt.
* Whether a failed install is the submission's fault or the grader's ("not assessable") is decided by the
  grader's own probes (the sandbox starts; the index serves the pinned pytest; the disk had room), never by
  reading the installer's log, which a submission can fill with any words it likes.

Like a reviewer following the submission's README (``pip install -e '.[test]'``):

* The submission's own package is installed too (``grader.project`` decides whether there is one): an
  editable install of a copy of the checkout, built in the sandbox like any other build (untrusted, private
  cache, ``--no-deps``: its dependencies are the vetted ones above). Its import hook (the ``.pth`` file or
  finder the build backend writes, pointing at the copy) is then removed: what stays is its metadata
  (``*.dist-info``: entry points, version, console scripts), while its code is imported from the checkout
  each run uses, at the folders the hook pointed to (``Env.import_roots``, e.g. ``src``). So a plugin
  registered through ``[project.entry-points]`` is found, and a probe that changes the checkout changes
  the code that runs. A failed build of the project is a note in the evidence, not a failed install.
* A lockfile's pins (``uv.lock``, ``poetry.lock``) are installed as constraints; when they cannot be
  installed with the grader's pinned tools, the install is retried without them and the evidence says so.
* The venv is built on the interpreter the project asks for (``.python-version``, ``requires-python``)
  when the machine has one the sandbox can run (``grader.interpreters``), else on the grader's own, and
  the evidence says so.

One venv serves every checkout with the same dependencies and the same package metadata files.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from grader import audit, sandbox
from grader.acquire import copy_checkout, no_space, no_space_reason, no_space_text
from grader.deeptree import remove_tree
from grader.errors import GradeError, NotAssessable
from grader.interpreters import Choice, choose
from grader.project import Project, read_project
from grader.requirements import Dependencies, build_extras, read_dependencies
from grader.walk import tree

__all__ = ["Env", "InstallFailed", "default_cache_root", "ensure_env", "read_requirements"]

# Bump when the venv layout or the grader's own additions change, so old cached venvs are not reused.
# 2: the venv holds compiled bytecode (the sandbox user cannot write it, so every run compiled everything).
# 3: it also holds pytest's rewritten plugin modules (`_rewrite_warmup`).
# 4: the grader's tools are pinned; the record and digest live beside the venv (`<key>.json`).
# 5: the submission's package metadata (editable install, hook removed), lockfile constraints, chosen Python.
# 6: the project is built offline in a throwaway venv, never in this one (red-team R1, R2): a venv of an
#    earlier format may hold whatever a submission's setup.py wrote into it, its digest recorded after
#    (red-team R7), so none is reused.
# 7: the record holds no evidence text about the submission that built it (red teams 9, 10), only the pins'
#    outcome: notes are worded for each submission that uses the environment.
ENV_FORMAT = "7"
_RECORD = ".json"  # <key>.json beside the venv: what was installed, the tools' versions, the digest
_TAIL_LINES = 12
_PROBE_TIMEOUT = 120.0
# The disk the cache is on had less than this free before the install: a failure is the grader's disk.
_ROOM = 256 * 1024**2
_FULL = 1024**2  # ... and less than this after it


class InstallFailed(GradeError):
    """The submission's own dependencies cannot be installed: its failure, scored, never "not assessable".

    Raised for a requirement the grader cannot parse, and for an install that failed while the grader's
    probes showed the sandbox, the package index and the disk working.
    """

    def __init__(self, reason: str, dependencies: Dependencies) -> None:
        super().__init__(reason)
        self.reason = reason
        self.dependencies = dependencies


@dataclass(frozen=True)
class Env:
    venv: Path
    python: Path
    bin: Path
    cached: bool
    duration: float
    tool: str  # "uv" | "pip"
    # The grader's pinned tools as installed (name -> version, read from the venv's metadata).
    tools: dict[str, str] = field(default_factory=dict)
    dependencies: Dependencies | None = None
    notes: tuple[str, ...] = ()  # e.g. a cached venv that failed verification and was rebuilt
    # What a reviewer reads in the evidence: the interpreter and why, the project itself, the lockfile.
    python_note: str = ""
    project: str = ""
    lock_note: str = ""
    # Folders of the checkout the project's editable install put on sys.path ("src", "."): each run
    # imports the submission's code from there, in its own copy of the checkout.
    import_roots: tuple[str, ...] = ()

    def described(self) -> list[str]:
        """The install's evidence lines: what was installed, from which lockfile, on which Python."""
        lines = [f"python: {self.python_note}"] if self.python_note else []
        if self.project:
            lines.append(f"project: {self.project}")
        if self.dependencies is not None:
            lines.append(f"dependencies: {self.dependencies.described()} ({self.tool})")
        if self.lock_note:
            lines.append(f"lockfile: {self.lock_note}")
        return lines


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def default_cache_root() -> Path:
    """Where environments are cached. As root, a folder the sandbox's unprivileged user can enter."""
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "cassette-envs"
    # Root's home is usually 0700: a venv under it would force the sandbox to keep running as root.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/cache/cassette-envs")
    return Path.home() / ".cache" / "cassette-envs"


def read_requirements(repo: Path) -> list[str]:
    """What the grader would install for ``repo`` (see ``grader.requirements.read_dependencies``)."""
    return read_dependencies(repo).requirements


# --- building --------------------------------------------------------------------------------------------


def _base_python() -> Path:
    """The interpreter the venv is built on: the grader's, or one the sandbox user can run (see sandbox)."""
    own = Path(sys.executable)
    if os.geteuid() != 0 or sandbox.reachable_by_sandbox_user(own):
        return own
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if sandbox.reachable_by_sandbox_user(Path(candidate)):
            return Path(candidate)
    return own


def _cache_key(deps: Dependencies, project: Project, python: Path) -> str:
    payload = {
        "format": ENV_FORMAT,
        "grader_modules": audit.installed_digest(),
        "requirements": deps.requirements,
        "constraints": deps.constraints,
        "project": project.digest if project.installable else None,
        "python": list(sys.version_info[:3]) if python == Path(sys.executable) else str(python),
        "implementation": sys.implementation.name,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def _uv_bin() -> str | None:
    try:
        from uv import find_uv_bin  # optional at run time: pip is the fallback
    except ImportError:
        return shutil.which("uv")
    try:
        return find_uv_bin()
    except FileNotFoundError:
        return shutil.which("uv")


def _tail(text: str) -> str:
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-_TAIL_LINES:])


def _free(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return _ROOM


class _Builder:
    """One build of one venv: its folders, environment and the sandboxed steps it runs."""

    def __init__(
        self, target: Path, deps: Dependencies, cache_root: Path, timeout: float, base: Path
    ) -> None:
        self.target = target
        self.deps = deps
        self.cache_root = cache_root
        self.timeout = timeout
        self.uv = _uv_bin()
        self.base = base
        # The grader's own files for this build (requirements, probe input, warm-up config): readable by the
        # sandbox user, never writable by it. Each step gets a fresh home of its own instead (`_home`): a
        # step that ran package code may leave links in its home, and nothing the grader writes goes there.
        self.work = _fresh_folder(cache_root, ".build-")
        self.req_file = self.work / "requirements.txt"
        self.req_file.write_text("\n".join(deps.requirements) + "\n", encoding="utf-8")
        self.constraints = self.work / "constraints.txt"
        self.constraints.write_text("".join(f"{pin}\n" for pin in deps.constraints), encoding="utf-8")
        self.shared_uv = cache_root / "uv-cache"
        self.shared_pip = cache_root / "pip-cache"
        for folder in (self.shared_uv, self.shared_pip):
            folder.mkdir(exist_ok=True)
        self.tool = "uv"
        self.free_before = _free(cache_root)

    def close(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)

    def step(
        self,
        argv: list[str],
        *,
        trusted: bool,
        timeout: float | None = None,
        writable: tuple[Path, ...] = (),
        network: bool = True,
        venv: Path | None = None,
        **more: Any,
    ) -> sandbox.RunResult:
        home = _fresh_folder(self.cache_root, ".home-")
        try:
            # Trusted: only the grader's installer runs, it may fill the shared caches. Untrusted: package
            # code may run (a build, a .pth file, a pytest plugin); it gets a private cache in its own home,
            # thrown away with it, and can write nothing but that home and the venv being built.
            caches = (self.shared_uv, self.shared_pip) if trusted else (home / "uv-cache", home / "pip-cache")
            env = {
                "UV_CACHE_DIR": str(caches[0]),
                "PIP_CACHE_DIR": str(caches[1]),
                "UV_PYTHON_DOWNLOADS": "never",
                # Copies, not hardlinks into the cache: a venv's files must not be the cache's files.
                "UV_LINK_MODE": "copy",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                **more,
            }
            return sandbox.run(
                argv,
                cwd=home,
                home=home,
                timeout=self.timeout if timeout is None else timeout,
                network=network,
                env=env,
                # ``venv``: the one venv the step may write (the one being built unless another is named).
                writable=[venv or self.target, *(caches if trusted else ()), *writable],
                # The installer, the base Python and the grader's build files may live outside the
                # system folders the sandbox shows.
                readable=[*(Path(p) for p in (self.uv, self.base) if p), self.work],
            )
        finally:
            shutil.rmtree(home, ignore_errors=True)

    def trusted(self, argv: list[str], **more: Any) -> sandbox.RunResult:
        return self.step(argv, trusted=True, **more)

    def untrusted(self, argv: list[str], **more: Any) -> sandbox.RunResult:
        return self.step(argv, trusted=False, **more)

    # -- the venv itself --

    def make_venv(self) -> None:
        result = None
        if self.uv is not None:
            argv = [self.uv, "venv", "--quiet", "--allow-existing", "--python", str(self.base)]
            result = self.trusted([*argv, str(self.target)])
            if result.returncode != 0 and no_space_text(result.stderr + result.stdout):
                raise self.not_assessable("venv", result)  # pip would not fit either
        if self.uv is None or result is None or result.returncode != 0:
            # uv could not run here (missing binary, unsupported platform): the standard library's way.
            self.tool = "pip"
            shutil.rmtree(self.target, ignore_errors=True)
            self.target.mkdir()
            result = self.trusted([str(self.base), "-m", "venv", str(self.target)])
            if result.returncode != 0:
                raise self.not_assessable("venv", result)
        # Before any package is installed: later steps may run package code that can change this venv's
        # folders, and the grader writes nothing into it after that.
        audit.install_into(self.target)

    def install_argv(self, *, build: bool, pinned: bool = False) -> list[str]:
        python = self.target / "bin" / "python"
        # No --compile-bytecode: compiling starts the venv's interpreter, which runs the installed packages'
        # .pth files, package code. `_build` compiles afterwards, in an untrusted step.
        constraints = ["-c", str(self.constraints)] if pinned else []
        if self.tool == "uv":
            argv = [self.uv or "uv", "pip", "install", "--quiet", "--python", str(python)]
            return [*argv, *([] if build else ["--no-build"]), "-r", str(self.req_file), *constraints]
        argv = [str(python), "-m", "pip", "install", "--quiet", "--no-compile"]
        only = [] if build else ["--only-binary", ":all:"]
        return [*argv, *only, "-r", str(self.req_file), *constraints]

    def install(self, *, pinned: bool) -> sandbox.RunResult:
        """The dependencies into a fresh venv: wheels only first (trusted), then with builds (untrusted)."""
        self.make_venv()
        result = self.trusted(self.install_argv(build=False, pinned=pinned))
        if result.timed_out or result.returncode == 0:
            return result  # a second attempt after a timeout would only spend the timeout again
        # Some requirement has no wheel for this platform: build it, as the sandbox user, with a private
        # cache. Start from a fresh venv so nothing of the first attempt is reused.
        shutil.rmtree(self.target, ignore_errors=True)
        self.target.mkdir()
        self.make_venv()
        return self.untrusted(self.install_argv(build=True, pinned=pinned))

    # -- the submission's own package --

    def install_project(self, repo: Path, project: Project, choice: Choice) -> tuple[str, list[str]]:
        """Install the project itself, editable, then drop its import hook: (evidence, import roots).

        The build runs the submission's code (setup.py, a build hook, an in-tree backend), so it never sees
        the network (red-team R1: a setup.py reached the host's loopback services) nor the venv the suite
        will run in (red-team R2: a setup.py rewrote the pinned pytest there). It builds into a throwaway
        venv holding only its backend (installed first, wheels only, before any of its code runs), offline
        and without build isolation; the grader then copies the build's ``*.dist-info`` (regular files
        only) into the suite's venv and nothing else.
        """
        name = project.name or "the project"
        if not project.installable:
            return _not_installed(project), []
        target_site = _open_site(self.target)
        if target_site is None:
            return f"{name} itself not installed: the venv has no single lib/python3.X/site-packages", []
        scratch = self.scratch_venv()
        site = _open_site(scratch) if scratch is not None else None
        if scratch is None or site is None:
            os.close(target_site)
            if scratch is not None:
                remove_tree(scratch)
            return f"{name} itself not installed: no venv could be made for its build", []
        copy = _fresh_folder(self.cache_root, ".project-")
        try:
            python = str(scratch / "bin" / "python")
            self.build_backend(python, project, scratch)
            before = set(os.listdir(site))
            copy_checkout(repo, copy)
            # --no-deps: the dependencies are the vetted ones installed above. The project's own
            # requires-python is not the installer's to enforce when the machine has no matching Python
            # (the choice's note says so): as for the lowest version it admits.
            if self.tool == "uv":
                argv = [self.uv or "uv", "pip", "install", "--quiet", "--python", python, "--no-deps"]
                argv += ["--no-build-isolation", "--offline"]
                argv += ["--python-version", choice.target] if choice.target else []
            else:
                argv = [python, "-m", "pip", "install", "--quiet", "--no-compile", "--no-deps"]
                argv += ["--no-build-isolation", "--no-index"]
                argv += ["--ignore-requires-python"] if choice.target else []
            offline: dict[str, Any] = {"writable": (copy,), "network": False, "venv": scratch}
            result = self.untrusted([*argv, "-e", str(copy)], **offline)
            roots = _drop_import_hooks(site, sorted(set(os.listdir(site)) - before), copy)
            regular = None
            if result.returncode != 0 and not result.timed_out:
                # A backend without editable support (PEP 660), e.g. an old pinned setuptools: a regular
                # install, whose copied code is then removed like a hook (the checkout's code runs).
                regular = self.untrusted([*argv, str(copy)], **offline)
                _drop_import_hooks(site, sorted(set(os.listdir(site)) - before), copy)
            for entry in sorted(set(os.listdir(site)) - before):
                if entry.endswith(".dist-info"):
                    _copy_metadata(site, entry, target_site)
        finally:
            os.close(target_site)
            if site is not None:
                os.close(site)
            remove_tree(copy)  # a build may have left a tree deeper than shutil.rmtree can recurse
            remove_tree(scratch)
        if result.returncode != 0 and (regular is None or regular.returncode != 0):
            why = "timed out" if result.timed_out else f"{self.tool} exit {result.returncode}"
            tail = _tail(result.stderr + "\n" + result.stdout).splitlines()
            detail = f": {tail[-1][:200]}" if tail else ""
            return f"{name} itself could not be installed (editable build failed, {why}{detail})", []
        if result.returncode != 0:
            tail = [t for t in _tail(result.stderr + "\n" + result.stdout).splitlines() if "hint:" not in t]
            detail = f" ({tail[-1].strip()[:160]})" if tail else ""
            return (
                f"{name} installed with a regular install: the editable build failed{detail}; its copied "
                "code was removed from the venv, so its metadata and entry points come from the install and "
                "its code from the checkout each run uses"
            ), []
        shown = ", ".join(r for r in roots if r != ".") or "the root"
        return (
            f"{name} installed editable from the checkout (its metadata and entry points; its code is "
            f"imported from {shown} of the checkout each run uses)"
        ), roots

    def scratch_venv(self) -> Path | None:
        """A fresh, empty venv on the same interpreter, for a build that must not touch the real one."""
        path = _fresh_folder(self.cache_root, ".project-venv-")
        if self.tool == "uv" and self.uv is not None:
            argv = [self.uv, "venv", "--quiet", "--allow-existing", "--python", str(self.base), str(path)]
        else:
            argv = [str(self.base), "-m", "venv", str(path)]
        if self.trusted(argv, venv=path).returncode != 0:
            remove_tree(path)
            return None
        return path

    def build_backend(self, python: str, project: Project, venv: Path) -> None:
        """Install the project's build requirements into ``venv`` (wheels only, with the network, before
        any code of the submission's runs), and what its backend asks for at build time."""
        if not project.build_requires:
            return
        if self.tool == "uv":
            argv = [self.uv or "uv", "pip", "install", "--quiet", "--python", python, "--no-build"]
        else:
            argv = [python, "-m", "pip", "install", "--quiet", "--no-compile", "--only-binary", ":all:"]
        extras = build_extras(project.build_requires)
        # Untrusted although no build runs: the installer starts the venv's interpreter.
        self.untrusted([*argv, *project.build_requires, *extras], venv=venv)

    def not_assessable(self, step: str, result: sandbox.RunResult) -> NotAssessable:
        output = result.stderr + "\n" + result.stdout
        if no_space_text(output) or _free(self.cache_root) < _FULL:
            head = (
                f"{no_space_reason('environment cache', self.cache_root)}; installing with {self.tool} failed"
            )
        else:
            head = f"cannot create a venv with {self.tool} (exit {result.returncode}; step: {step})"
        tail = _tail(output)
        return NotAssessable(f"{head}\n{tail}" if tail else head)

    # -- deciding who failed --

    def infrastructure_trouble(self) -> str | None:
        """Why the grader, not the submission, is to blame for a failed install; None when its probes pass."""
        if self.free_before < _ROOM and _free(self.cache_root) < _FULL:
            return no_space_reason("environment cache", self.cache_root)
        started = self.untrusted([str(self.base), "-c", "pass"], timeout=_PROBE_TIMEOUT)
        if started.returncode != 0:
            why = "timed out" if started.timed_out else f"exit {started.returncode}"
            return f"the sandbox cannot start a command ({why}; the grader's probe)"
        name, version = next(iter(self.deps.tools.items()))
        pinned = f"{name}=={version}"
        if self.tool == "uv" and self.uv is not None:
            probe_in = self.work / "probe.in"
            probe_in.write_text(pinned + "\n", encoding="utf-8")
            argv = [self.uv, "pip", "compile", "--quiet", "--no-cache", "--no-header"]
            argv += ["--python", str(self.base), "--no-deps", str(probe_in)]
        else:  # downloads into the step's own home (its working folder)
            argv = [str(self.target / "bin" / "python"), "-m", "pip", "download", "--quiet", "--no-deps"]
            argv += ["--no-cache-dir", "--only-binary", ":all:", "-d", "probe-download", pinned]
        answered = self.untrusted(argv, timeout=_PROBE_TIMEOUT)
        if answered.returncode != 0:
            why = "timed out" if answered.timed_out else f"{self.tool} exit {answered.returncode}"
            return (
                f"package index unreachable: the grader's probe for {pinned} failed ({why}); "
                "an infrastructure problem, not the submission's"
            )
        return None


def _install_failed(builder: _Builder, result: sandbox.RunResult) -> GradeError:
    """The error for a failed install: NotAssessable if the grader's probes fail, else InstallFailed."""
    output = result.stderr + "\n" + result.stdout
    tail = _tail(output)
    trouble = builder.infrastructure_trouble()
    if trouble is not None:
        head = f"{trouble}; installing with {builder.tool} failed"
        return NotAssessable(f"{head}\n{tail}" if tail else head)
    submitted = [r for r in builder.deps.requirements if r.split("==")[0] not in builder.deps.tools]
    listed = ", ".join(submitted) or "none besides the grader's tools"
    if result.timed_out:
        head = f"the submission's dependencies took longer than {builder.timeout:.0f} s to install ({listed})"
    else:
        head = (
            f"the submission's dependencies cannot be installed ({builder.tool} exit {result.returncode}; "
            f"requirements: {listed})"
        )
    return InstallFailed(f"{head}\n{tail}" if tail else head, builder.deps)


def _open_site(venv: Path) -> int | None:
    """A descriptor of the venv's site-packages, opened one folder at a time without following a link.

    Taken before a build runs: whatever the build then does to the venv's paths (a link put in place of
    ``lib``), the grader lists and removes only inside the folder it opened.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(venv, flags)
    except OSError:
        return None
    try:
        for part in ("lib", None, "site-packages"):
            if part is None:  # lib/python3.X
                names = sorted(n for n in os.listdir(fd) if n.startswith("python3"))
                if len(names) != 1:
                    raise OSError("no single lib/python3.X")
                part = names[0]
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
        return fd
    except OSError:
        os.close(fd)
        return None


def _read_at(dir_fd: int | None, name: str, limit: int = 8192) -> str:
    """The start of a regular file in ``dir_fd`` (None: ``name`` is a path): never through a link, never
    blocking on a FIFO."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return ""
    try:
        return os.read(fd, limit).decode("utf-8", "replace") if stat.S_ISREG(os.fstat(fd).st_mode) else ""
    finally:
        os.close(fd)


def _remove_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` in ``dir_fd``, a folder tree included, never following a link."""
    info = os.lstat(name, dir_fd=dir_fd)
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    try:
        for _dirpath, dirnames, filenames, fd in os.fwalk(name, topdown=False, dir_fd=dir_fd):
            for entry in filenames:
                os.unlink(entry, dir_fd=fd)
            for entry in dirnames:
                if stat.S_ISLNK(os.lstat(entry, dir_fd=fd).st_mode):
                    os.unlink(entry, dir_fd=fd)
                else:
                    os.rmdir(entry, dir_fd=fd)
        os.rmdir(name, dir_fd=dir_fd)
    except RecursionError:
        # Deeper than fwalk recurses: rm (no recursion, no link followed), reaching the folder through the
        # grader's own descriptor, never through a path the build could have changed.
        here = f"/proc/{os.getpid()}/fd/{dir_fd}/{name}"
        subprocess.run(["rm", "-rf", "--one-file-system", "--", here], check=False, capture_output=True)


_METADATA_FILE_CAP = 1024 * 1024
_METADATA_FILES = 200


def _copy_metadata(source_fd: int, name: str, target_fd: int) -> None:
    """Copy the folder ``name`` (a ``*.dist-info``) from one site-packages to another, by descriptor: its
    regular files only (no link followed, nothing below it), each capped; what exists is replaced."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        src = os.open(name, flags, dir_fd=source_fd)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            _remove_at(target_fd, name)
        os.mkdir(name, 0o755, dir_fd=target_fd)
        dst = os.open(name, flags, dir_fd=target_fd)
        try:
            for entry in sorted(os.listdir(src))[:_METADATA_FILES]:
                text = _read_regular(src, entry, _METADATA_FILE_CAP)
                if text is None:
                    continue
                fd = os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dst)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(text)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _read_regular(dir_fd: int, name: str, cap: int) -> bytes | None:
    """A regular file's bytes (None: a link, a folder, a FIFO, or larger than ``cap``)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > cap:
            return None
        chunks: list[bytes] = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            if sum(map(len, chunks)) > cap:
                return None
        return b"".join(chunks)
    finally:
        os.close(fd)


def _drop_import_hooks(site_fd: int, added: list[str], copy: Path) -> list[str]:
    """Remove what an install added to the site-packages ``site_fd`` besides its ``*.dist-info``: an editable
    install's ``.pth`` file or finder module pointing at the build's copy, a regular install's code.

    Returns the copy's folders the hook put on the path, relative ("src"): a ``.pth`` line names the
    folder; a setuptools finder maps each package to its folder, whose parent is the root.
    """
    roots: list[str] = []

    def note(where: str, parent: bool) -> None:
        real = Path(os.path.realpath(where))
        real = real.parent if parent else real
        if real.is_relative_to(copy):
            roots.append(real.relative_to(copy).as_posix() or ".")

    for name in added:
        try:
            info = os.lstat(name, dir_fd=site_fd)
        except OSError:
            continue
        if name.endswith(".dist-info") and stat.S_ISDIR(info.st_mode):
            continue
        if name.endswith(".pth"):
            for line in _read_at(site_fd, name).splitlines():
                if line.strip() and not line.startswith(("#", "import")) and os.path.isabs(line.strip()):
                    note(line.strip(), parent=False)
        elif name.startswith("__editable__") and name.endswith(".py"):
            mapping = re.search(r"MAPPING[^=\n]*=\s*(\{[^}]*\})", _read_at(site_fd, name, 65536))
            for found in re.findall(r"""['"](/[^'"]+)['"]""", mapping.group(1) if mapping else ""):
                if Path(found).is_relative_to(copy) and found.rstrip("/") != str(copy):
                    note(found, parent=True)
        try:
            _remove_at(site_fd, name)
        except OSError:
            pass
    return list(dict.fromkeys(roots))


def _not_installed(project: Project) -> str:
    return f"{project.name or 'the project'} itself not installed: {project.why_not}"


@dataclass
class _Built:
    tool: str
    project: str = ""
    import_roots: list[str] = field(default_factory=list)
    # The lockfile's pins: "" (none), "honoured", or "dropped" (the installer's last line in ``pins_tail``).
    pins: str = ""
    pins_tail: str = ""


def _lock_note(deps: Dependencies, choice: Choice, pins: str, tail: str) -> str:
    """The lockfile's evidence line, worded for *this* submission's lockfile: a cached environment is shared
    by every submission with the same pins, whatever its lockfile is called."""
    if pins == "honoured":
        return f"{len(deps.constraints)} versions pinned by {deps.lockfile} honoured"
    if pins == "dropped":
        why = f" ({tail})" if tail else ""
        return (
            f"the versions pinned by {deps.lockfile} could not be installed with the grader's tools on "
            f"Python {choice.version}{why}; installed the declared requirements without them"
        )
    return ""


def _build(
    target: Path,
    repo: Path,
    deps: Dependencies,
    project: Project,
    choice: Choice,
    cache_root: Path,
    timeout: float,
) -> _Built:
    """Build the venv at ``target``. Raises NotAssessable or InstallFailed."""
    target.mkdir()
    builder = _Builder(target, deps, cache_root, timeout, choice.python)
    built = _Built(tool="uv")
    try:
        pinned = bool(deps.constraints)
        result = builder.install(pinned=pinned)
        if result.returncode != 0 and pinned and not result.timed_out:
            # The lockfile's pins and the grader's pinned tools (or this Python) do not go together:
            # install what the submission declares without them, and say so.
            tail = _tail(result.stderr + "\n" + result.stdout).splitlines()
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            result = builder.install(pinned=False)
            if result.returncode == 0:
                built.pins, built.pins_tail = "dropped", tail[-1][:200] if tail else ""
        if result.returncode != 0:
            raise _install_failed(builder, result)
        if pinned and not built.pins:
            built.pins = "honoured"
        built.tool = builder.tool
        built.project, built.import_roots = builder.install_project(repo, project, choice)
        python = target / "bin" / "python"
        # Bytecode is compiled here, once: the sandbox user cannot write the venv, so without it every run
        # would compile pytest, the dependencies and the audit hook again. A failed compile only costs speed.
        site = [str(p) for p in sorted(target.glob("lib/python3*/site-packages"))]
        builder.untrusted([str(python), "-S", "-m", "compileall", "-q", "-j", "0", *site])
        # Loads the venv's pytest plugins, which are package code: untrusted.
        builder.untrusted(_rewrite_warmup(python, builder.work), PYTHONDONTWRITEBYTECODE="")
        return built
    finally:
        builder.close()


def _fresh_folder(parent: Path, prefix: str) -> Path:
    """A new folder the sandbox user can enter and read, owned by the grader."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    folder.chmod(0o755)
    return folder


def _rewrite_warmup(python: Path, work: Path) -> list[str]:
    """A pytest start-up in an empty folder, so pytest caches its rewritten plugin modules in the venv.

    pytest rewrites the asserts of every plugin module it loads (a whole distribution's when the plugin
    comes from an entry point) and caches the result beside the module, but the sandbox user cannot write
    the venv: without this, every suite run (the canary's record run too) rewrote anyio's and pytest-socket's
    modules again. It loads what a run loads: the entry-point plugins and ``-p _grader_pytest``. It collects
    nothing (exit 5), reads nothing from the checkout, and its outcome is ignored: a failure only costs speed.
    """
    folder = work / "warmup"
    folder.mkdir()
    folder.chmod(0o755)
    ini = folder / "warmup.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    return [
        str(python), "-m", "pytest", "--collect-only", "-q", "-c", str(ini), "--rootdir", str(folder),
        "-p", "no:cacheprovider", "-p", "_grader_pytest", str(folder),
    ]  # fmt: skip


# --- the record beside a finished venv: tool versions and a digest of every file ---------------------------
#
# Verifying a reused venv hashed every file of it on every grade (~6,000 files, ~60 MB: 0.15 s CPU before
# any check could start). The record also keeps each entry's status (`_stats`), and a venv whose entries all
# still have the status recorded is the venv that was digested: any write, chmod, chown, rename or new link
# sets an entry's change time (ctime) to the current time, and no system call sets it back (only moving the
# system clock could, which needs privileges that could rewrite the record itself). Like git's index, which
# trusts the same fields to skip re-hashing a file. Any difference in status, however small (a cache copied
# elsewhere gets new ctimes), falls back to the full digest: the content decides, and a venv whose content
# still matches has its record's status refreshed instead of being rebuilt.


def _digest(venv: Path) -> dict[str, str]:
    """relative path -> sha256 of (kind, mode, owner, content or link target), for every entry in ``venv``."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in tree(venv):
        dirnames.sort()
        for name in sorted((*dirnames, *filenames)):
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            head = f"{stat.S_IFMT(info.st_mode)}:{stat.S_IMODE(info.st_mode):o}:{info.st_uid}:{info.st_gid}:"
            h = hashlib.sha256(head.encode())
            if stat.S_ISLNK(info.st_mode):
                h.update(os.readlink(path).encode("utf-8", "surrogateescape"))
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    for chunk in iter(lambda: handle.read(1 << 20), b""):
                        h.update(chunk)
            out[os.path.relpath(path, venv)] = h.hexdigest()
    return out


def _stats(venv: Path) -> dict[str, str]:
    """relative path -> kind, mode, owner, size, inode, mtime and ctime (ns) of every entry in ``venv``."""
    out: dict[str, str] = {}
    top = os.path.join(venv, "")
    for dirpath, dirnames, filenames in tree(venv):
        # tree joins every dirpath onto ``venv`` as given: the relative path is what follows it (relpath
        # would cost more than the lstat).
        where = os.path.join(dirpath, "")[len(top) :]
        for name in (*dirnames, *filenames):
            st = os.lstat(os.path.join(dirpath, name))
            out[where + name] = (
                f"{st.st_mode:o}:{st.st_uid}:{st.st_gid}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:"
                f"{st.st_ctime_ns}"
            )
    return out


def _head(path: Path, limit: int = 8192) -> str:
    """The start of a regular file a build wrote: never through a link, never blocking on a FIFO."""
    return _read_at(None, str(path), limit)


def _tool_versions(venv: Path, names: list[str]) -> dict[str, str]:
    """name -> installed version, read from the venv's ``*.dist-info/METADATA`` (nothing is imported)."""

    found: dict[str, str] = {}
    for metadata in sorted(venv.glob("lib/python3*/site-packages/*.dist-info/METADATA")):
        fields: dict[str, str] = {}
        for line in _head(metadata).splitlines()[:40]:
            key, sep, value = line.partition(": ")
            if sep and key in ("Name", "Version"):
                fields.setdefault(key, value.strip())
        name = canonicalize_name(fields.get("Name", ""))
        if name in names and "Version" in fields:
            found[name] = fields["Version"]
    return {name: found.get(name, "missing") for name in names}


def _seal(venv: Path) -> None:
    """Take group and other write access off everything in ``venv`` (uv leaves its lock file 0666)."""
    for dirpath, dirnames, filenames in tree(venv):
        for name in (*dirnames, *filenames):
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o022)


def _write_record(
    path: Path, venv: Path, deps: Dependencies, built: _Built, choice: Choice
) -> dict[str, object]:
    _seal(venv)
    record: dict[str, object] = {
        "requirements": deps.requirements,
        "constraints": deps.constraints,
        "tool": built.tool,
        "project": built.project,
        "import_roots": built.import_roots,
        "pins": built.pins,
        "pins_tail": built.pins_tail,
        "tools": _tool_versions(venv, list(deps.tools)),
        "files": _digest(venv),
        "stats": _stats(venv),
    }
    _save_record(path, record)
    return record


def _save_record(path: Path, record: dict[str, object]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
    partial.chmod(0o644)
    partial.replace(path)


def _read_record(path: Path) -> dict[str, object] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else None


def _changed(venv: Path, record: dict[str, object], path: Path | None = None) -> str | None:
    """The first entry of ``venv`` that differs from its record ("added"/"removed"/"changed"), or None.

    Every entry with the status the record holds: None without reading a byte (see `_stats`). Otherwise the
    content decides; when it still matches, the record at ``path`` gets the new status.
    """
    try:
        if record.get("stats") == _stats(venv):
            return None
        now = _digest(venv)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    files = record["files"]
    assert isinstance(files, dict)
    for name in sorted(set(now) | set(files)):
        if name not in files:
            return f"{name} added"
        if name not in now:
            return f"{name} removed"
        if now[name] != files[name]:
            return f"{name} changed"
    if path is not None:
        with contextlib.suppress(OSError):  # a record left as it was is only slower next time
            _save_record(path, {**record, "stats": _stats(venv)})
    return None


# --- the public entry point -------------------------------------------------------------------------------


def ensure_env(repo: Path, *, cache_root: Path, timeout: float) -> Env:
    """The submission's venv, built once per distinct dependency set.

    Raises InstallFailed when the submission's own dependencies cannot be installed, NotAssessable when the
    grader's probes show its own environment failing: the sandbox, the package index, or the disk
    (``no space left on device: environment cache <folder> ...``; a cache path that is a file or that the
    grader cannot write is NotAssessable too).
    """
    cache_root = Path(cache_root).resolve()  # it is handed to sandboxed commands run in other folders
    try:
        return _ensure_env(repo, cache_root=cache_root, timeout=timeout)
    except OSError as exc:
        if no_space(exc):
            raise NotAssessable(no_space_reason("environment cache", cache_root)) from None
        what = exc.strerror or type(exc).__name__
        where = f" ({exc.filename})" if exc.filename else ""
        raise NotAssessable(f"cannot use the environment cache {cache_root}: {what}{where}") from None


def _invalid_reason(deps: Dependencies) -> str:
    first = deps.invalid[0]
    more = f" (and {len(deps.invalid) - 1} more)" if len(deps.invalid) > 1 else ""
    return f"the submission's dependencies cannot be installed: {first.line()}{more}"


def _ensure_env(repo: Path, *, cache_root: Path, timeout: float) -> Env:
    start = time.monotonic()
    deps = read_dependencies(repo)
    if deps.invalid:
        raise InstallFailed(_invalid_reason(deps), deps)
    project = read_project(repo)
    choice = choose(
        _base_python(),
        _uv_bin(),
        requires_python=project.requires_python,
        where=project.requires_python_where,
        python_version=project.python_version,
    )
    cache_root.mkdir(parents=True, exist_ok=True)
    key = _cache_key(deps, project, choice.python)
    target = cache_root / key
    record_path = cache_root / f"{key}{_RECORD}"
    notes: list[str] = []
    # Concurrent grades of submissions with the same dependencies: one builds, the others wait and reuse.
    with open(cache_root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _read_record(record_path) if target.is_dir() else None
        changed = _changed(target, record, record_path) if record is not None else None
        if changed is not None:
            notes.append(f"the cached environment {key} no longer matched its record ({changed}): rebuilt")
        cached = record is not None and changed is None
        if not cached:
            record_path.unlink(missing_ok=True)
            shutil.rmtree(target, ignore_errors=True)  # half-built, or changed since it was built
            try:
                built = _build(target, repo, deps, project, choice, cache_root, timeout)
                record = _write_record(record_path, target, deps, built, choice)
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
    assert record is not None
    tools = record.get("tools")
    # What the evidence says about the submission is its own, never the record's (red teams 9 and 10: the
    # first submission's project name and Python note, free text, were shown in every later report that
    # shared its environment). Only an installed project's note and import roots come from the record: the
    # key holds that project's whole tree, so whoever shares the environment submitted the same project.
    installed = project.installable
    lock_note = _lock_note(deps, choice, str(record.get("pins") or ""), str(record.get("pins_tail") or ""))
    return Env(
        venv=target,
        python=target / "bin" / "python",
        bin=target / "bin",
        cached=cached,
        duration=time.monotonic() - start,
        tool=str(record.get("tool", "uv")),
        tools=dict(tools) if isinstance(tools, dict) else {},
        dependencies=deps,
        notes=tuple(notes),
        python_note=choice.note,
        project=str(record.get("project") or "") if installed else _not_installed(project),
        lock_note=lock_note,
        import_roots=tuple(str(r) for r in _listed(record.get("import_roots"))) if installed else (),
    )
