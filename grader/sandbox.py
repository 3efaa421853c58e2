"""The one place that runs submission code: no network, no credentials, bounded time, memory and output.

Layers, outermost first (each only when the machine supports it, probed once):

* ``unshare -n -p -f --kill-child`` (``-rn`` when not root): a fresh network namespace (even ``lo`` is down
  unless ``loopback=True``) and a pid namespace, so every process the command forks dies with it, even one
  that escaped the process group with ``setsid``.
* ``prlimit``: address space, file size, process count, open files, no core dumps.
* ``setpriv`` (root only): the command runs as ``nobody`` so RLIMIT_NPROC applies (root is exempt) and it
  cannot write the cached venv or the grader's files. The folders it must write (cwd, home, log folders)
  are chowned to that uid first. When that user could not even execute the interpreter (for example a
  Python under a 0700 ``/root``), the command runs as root inside the namespaces instead; ``RunResult``
  records which.
"""

from __future__ import annotations

import functools
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Isolation", "RunResult", "isolation", "reachable_by_sandbox_user", "run", "scrubbed_env"]

NOBODY_UID = 65534
NOBODY_GID = 65534
# Resource limits for every sandboxed command.
LIMIT_ADDRESS_SPACE = 4 * 1024**3
LIMIT_FILE_SIZE = 512 * 1024**2
LIMIT_PROCESSES = 256
LIMIT_OPEN_FILES = 1024

_TRUNCATED_MARK = "\n[... output truncated by the grader ...]\n"

# Variables a command may inherit from the grader's environment; everything else is dropped.
_ALLOWED = {
    "PATH",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "FORCE_COLOR",
    "SOURCE_DATE_EPOCH",
}
_ALLOWED_PREFIXES = ("LC_",)
# Only the install step (network=True) needs the package index configuration and proxies.
_NETWORK_ALLOWED = {
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "PIP_TRUSTED_HOST",
    "PIP_CERT",
    "PIP_DEFAULT_TIMEOUT",
    "PIP_RETRIES",
    "PIP_DISABLE_PIP_VERSION_CHECK",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
}
_NETWORK_PREFIXES = ("UV_",)
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASS|CREDENTIAL|AUTH|SESSION|COOKIE|PRIVATE|SIGNATURE|BEARER|DSN|WEBHOOK|_PAT\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Isolation:
    network: str  # "namespace+pytest-socket" | "pytest-socket only"
    credentials: str  # "scrubbed"


@dataclass
class RunResult:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration: float
    truncated: bool
    # Which user the command ran as: "nobody" (privileges dropped) or the grader's own user.
    user: str = field(default="grader")
    # True when the grader stopped the command early (`run(stop=...)`), e.g. a probe of a suite that
    # already timed out elsewhere: not the command's own outcome.
    stopped: bool = False


@dataclass(frozen=True)
class _Caps:
    netns: bool
    pidns: bool
    unshare_base: tuple[str, ...]  # ("unshare",) or ("unshare", "-r") when not root
    prlimit: bool
    setpriv: bool
    ip: str | None


def _probe(argv: Sequence[str]) -> bool:
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.lru_cache(maxsize=1)
def _caps() -> _Caps:
    root = os.geteuid() == 0
    base: tuple[str, ...] = ("unshare",) if root else ("unshare", "-r")
    has_unshare = shutil.which("unshare") is not None
    netns = has_unshare and _probe([*base, "-n", "true"])
    pidns = has_unshare and _probe([*base, "-p", "-f", "--kill-child", "true"])
    return _Caps(
        netns=netns,
        pidns=pidns,
        unshare_base=base,
        prlimit=shutil.which("prlimit") is not None and _probe(["prlimit", "--core=0", "--", "true"]),
        setpriv=root and shutil.which("setpriv") is not None,
        ip=shutil.which("ip"),
    )


def isolation() -> Isolation:
    """What the sandbox can guarantee on this machine (probed once)."""
    network = "namespace+pytest-socket" if _caps().netns else "pytest-socket only"
    return Isolation(network=network, credentials="scrubbed")


def _looks_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def scrubbed_env(
    *,
    home: Path,
    cwd: Path | None = None,
    venv: Path | None = None,
    extra: Mapping[str, str] | None = None,
    network: bool = False,
    base: Mapping[str, str] | None = None,
    audit_log: Path | None = None,
    audit_root: Path | None = None,
) -> dict[str, str]:
    """The environment of a sandboxed command: an allowlist of the grader's, minus anything secret-looking.

    ``HOME`` is ``home`` and ``TMPDIR`` is ``home/tmp`` (both created). ``extra`` is applied last and is
    not filtered: the caller may deliberately pass a fake key (the canary probe) or a log path.
    """
    source = os.environ if base is None else base
    env: dict[str, str] = {}
    for name, value in source.items():
        allowed = name in _ALLOWED or name.startswith(_ALLOWED_PREFIXES)
        if network:
            allowed = allowed or name in _NETWORK_ALLOWED or name.startswith(_NETWORK_PREFIXES)
        if allowed and not _looks_secret(name):
            env[name] = value
    home = Path(home)
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    path = env.get("PATH") or os.defpath
    if venv is not None:
        path = f"{Path(venv) / 'bin'}{os.pathsep}{path}"
        env["VIRTUAL_ENV"] = str(venv)
    env.update(
        PATH=path,
        HOME=str(home),
        TMPDIR=str(tmp),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        CASSETTE_MODE="replay",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
    )
    env.setdefault("LANG", "C.UTF-8")
    if cwd is not None:
        env["PYTHONPATH"] = str(cwd)
    if not network:
        env["PIP_NO_INDEX"] = "1"
        env["UV_OFFLINE"] = "1"
    if audit_log is not None:
        env["GRADER_AUDIT_LOG"] = str(audit_log)
        env["GRADER_AUDIT_ROOT"] = str(audit_root if audit_root is not None else (cwd or home))
    if extra:
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


# --- privilege drop ---------------------------------------------------------------------------------------


def _other_can(st: os.stat_result, bits_other: int, bits_owner: int) -> bool:
    if st.st_uid == NOBODY_UID:
        return st.st_mode & bits_owner == bits_owner
    return st.st_mode & bits_other == bits_other


def _reachable_by_nobody(path: Path, *, execute: bool = False) -> bool:
    """Whether uid ``nobody`` can traverse to ``path`` (and read/execute it); ignores groups and ACLs."""
    try:
        real = Path(os.path.realpath(path))
        parts = [*reversed(real.parents), real]
        for parent in parts[:-1]:
            if not _other_can(parent.stat(), stat.S_IXOTH, stat.S_IXUSR):
                return False
        st = real.stat()
    except OSError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return _other_can(st, stat.S_IXOTH | stat.S_IROTH, stat.S_IXUSR | stat.S_IRUSR)
    if execute:
        return _other_can(st, stat.S_IXOTH | stat.S_IROTH, stat.S_IXUSR | stat.S_IRUSR)
    return _other_can(st, stat.S_IROTH, stat.S_IRUSR)


def reachable_by_sandbox_user(path: Path) -> bool:
    """Whether a command dropped to the sandbox user could execute ``path`` (a Python to build a venv on)."""
    return _reachable_by_nobody(Path(path), execute=True)


def _venv_interpreter_paths(venv: Path) -> list[Path]:
    paths = [venv / "bin" / "python"]
    cfg = venv / "pyvenv.cfg"
    try:
        for line in cfg.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                paths.append(Path(value.strip()))
    except OSError:
        pass
    return paths


def _resolve_exe(argv0: str, path_var: str) -> Path | None:
    found = shutil.which(argv0, path=path_var)
    return Path(found) if found else None


def _chown_tree(root: Path, uid: int = NOBODY_UID, gid: int = NOBODY_GID) -> None:
    # lchown: never follow a submission's symlink to chown something outside its tree.
    os.lchown(root, uid, gid)
    if root.is_dir() and not root.is_symlink():
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            for name in (*dirnames, *filenames):
                try:
                    os.lchown(os.path.join(dirpath, name), uid, gid)
                except OSError:
                    pass


def _prepare_drop(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    home: Path,
    venv: Path | None,
    writable: Iterable[Path],
) -> bool:
    """Decide whether the command can run as nobody; if so, hand it the folders it must write."""
    if not _caps().setpriv:
        return False
    owned = [cwd, home, *writable]
    executables = []
    exe = _resolve_exe(argv[0], env.get("PATH", os.defpath)) if argv else None
    if exe is not None:
        executables.append(exe)
    if venv is not None:
        executables.extend(_venv_interpreter_paths(venv))
        if not _reachable_by_nobody(venv):
            return False
    if not all(_reachable_by_nobody(p, execute=True) for p in executables):
        return False
    # The owned folders become nobody's, but their parents must already be traversable: never chmod those.
    for path in owned:
        real = Path(os.path.realpath(path))
        if not all(_reachable_by_nobody(parent) for parent in real.parents):
            return False
    for path in owned:
        path.mkdir(parents=True, exist_ok=True)
        _chown_tree(path)
    return True


# --- running ----------------------------------------------------------------------------------------------

_LO_UP_PY = (
    "import fcntl,socket,struct;s=socket.socket();"
    "f=struct.unpack('16sH',fcntl.ioctl(s,0x8913,struct.pack('16sH',b'lo',0)))[1];"
    "fcntl.ioctl(s,0x8914,struct.pack('16sH',b'lo',f|1))"
)


def _wrap(argv: list[str], *, network: bool, loopback: bool, drop: bool) -> list[str]:
    caps = _caps()
    inner = list(argv)
    if drop:
        inner = ["setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_GID}", "--clear-groups", "--", *inner]
    if caps.prlimit:
        inner = [
            "prlimit",
            f"--as={LIMIT_ADDRESS_SPACE}",
            f"--fsize={LIMIT_FILE_SIZE}",
            f"--nproc={LIMIT_PROCESSES}",
            f"--nofile={LIMIT_OPEN_FILES}",
            "--core=0",
            "--",
            *inner,
        ]
    prefix: list[str] = []
    isolate_net = not network and caps.netns
    if isolate_net or caps.pidns:
        prefix = list(caps.unshare_base)
        if isolate_net:
            prefix.append("-n")
        if caps.pidns:
            prefix += ["-p", "-f", "--kill-child"]
        prefix.append("--")
    if isolate_net and loopback:
        # Bring `lo` up as (namespace) root before dropping privileges, then exec the command.
        up = f"{caps.ip} link set lo up" if caps.ip else f'"{sys.executable}" -c "{_LO_UP_PY}"'
        inner = ["/bin/sh", "-c", f'{up} && exec "$@"', "sh", *inner]
    return [*prefix, *inner]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    home: Path,
    timeout: float,
    venv: Path | None = None,
    env: Mapping[str, str] | None = None,
    network: bool = False,
    loopback: bool = False,
    audit_log: Path | None = None,
    audit_root: Path | None = None,
    output_cap: int = 2_000_000,
    writable: Sequence[Path] = (),
    pass_fds: Sequence[int] = (),
    stop: threading.Event | None = None,
) -> RunResult:
    """Run ``argv`` sandboxed; never raises for the command's own failure (see ``RunResult``).

    ``writable``: extra folders the command must be able to write besides ``cwd`` and ``home`` (the folders
    of ``audit_log`` and of any absolute ``*_LOG`` path in ``env`` are added automatically).
    ``pass_fds``: descriptors the command inherits (the guard plugin's result log, opened by the grader in a
    folder the sandbox user cannot reach).
    ``stop``: when set while the command runs, it is killed and the result says ``stopped``.
    """
    argv = [str(a) for a in argv]
    cwd, home = Path(cwd), Path(home)
    home.mkdir(parents=True, exist_ok=True)
    child_env = scrubbed_env(
        home=home, cwd=cwd, venv=venv, extra=env, network=network, audit_log=audit_log, audit_root=audit_root
    )
    log_dirs = [Path(audit_log).parent] if audit_log is not None else []
    for name, value in (env or {}).items():
        if name.endswith("_LOG") and os.path.isabs(value):
            log_dirs.append(Path(value).parent)
    drop = _prepare_drop(argv, child_env, cwd, home, Path(venv) if venv else None, [*writable, *log_dirs])
    full = _wrap(argv, network=network, loopback=loopback, drop=drop)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            full,
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        return RunResult(argv, None, "", f"cannot start {argv[0]}: {exc.strerror}", False, 0.0, False)
    try:
        out, err, timed_out, truncated, stopped = _collect(proc, timeout=timeout, cap=output_cap, stop=stop)
    finally:
        if drop:
            # Hand everything back (the child is dead: its pid namespace is gone), so the grader's later
            # git commands see no "dubious ownership" and nothing stays writable by the next command.
            for path in (cwd, home, *writable, *log_dirs):
                if path.exists():
                    _chown_tree(path, os.getuid(), os.getgid())
    duration = time.monotonic() - start
    user = "nobody" if drop else "grader"
    code = None if timed_out or stopped else proc.returncode
    return RunResult(argv, code, out, err, timed_out, duration, truncated, user, stopped)


def _collect(
    proc: subprocess.Popen[bytes], *, timeout: float, cap: int, stop: threading.Event | None = None
) -> tuple[str, str, bool, bool, bool]:
    """Drain both pipes with a cap until EOF, the deadline, ``stop``, or shortly after the command exits."""
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout
    bufs: dict[int, bytearray] = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    sizes = dict.fromkeys(bufs, 0)
    sel = selectors.DefaultSelector()
    for pipe in (proc.stdout, proc.stderr):
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe, selectors.EVENT_READ)
    timed_out = stopped = False
    exited_at: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            # A daemon the command left behind may hold the pipes open: stop reading shortly after exit.
            if exited_at is not None and now - exited_at > 0.5:
                break
            if now >= deadline:
                timed_out = proc.poll() is None
                break
            if stop is not None and stop.is_set() and exited_at is None:
                stopped = True
                break
            wait = min(deadline - now, 0.1)
            for key, _ in sel.select(wait):
                fd = key.fileobj.fileno()  # type: ignore[union-attr]
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                sizes[fd] += len(chunk)
                room = cap - len(bufs[fd])
                if room > 0:
                    bufs[fd] += chunk[:room]
    finally:
        _kill_group(proc.pid)
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    truncated = any(sizes[fd] > cap for fd in bufs)
    texts = []
    for fd in list(bufs):
        text = bytes(bufs[fd]).decode("utf-8", errors="replace")
        if sizes[fd] > cap:
            text += _TRUNCATED_MARK
        texts.append(text)
    return texts[0], texts[1], timed_out, truncated, stopped
