"""The per-submission venv: the submission's declared dependencies plus pytest, cached by their hash.

The only step with network. Dependencies are read statically (never by running the submission's build
backend to ask); the install itself still runs in the sandbox because installing an sdist runs its code.
One venv serves every checkout with the same dependencies: the submission runs from its checkout with
``PYTHONPATH``, never installed into the venv.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from grader import audit, sandbox
from grader.acquire import no_space, no_space_reason, no_space_text
from grader.errors import NotAssessable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["Env", "default_cache_root", "ensure_env", "read_requirements"]

# Bump when the venv layout or the grader's own additions change, so old cached venvs are not reused.
# 2: the venv holds compiled bytecode (the sandbox user cannot write it, so every run compiled everything).
# 3: it also holds pytest's rewritten plugin modules (`_rewrite_warmup`).
ENV_FORMAT = "3"
GRADER_REQUIREMENTS = ("pytest", "pytest-socket")
_MARKER = ".grader-env-complete"
_EXTRA_GROUPS = ("test", "tests", "testing", "dev")
_REQUIREMENT_FILES = ("requirements.txt", "requirements-dev.txt", "requirements-test.txt")
_TAIL_LINES = 12
_NETWORK_TROUBLE = re.compile(
    r"failed to fetch|error sending request|dns error|name or service not known|temporary failure in name"
    r"|connection refused|connection reset|tcp connect error|failed to establish a new connection"
    r"|network is unreachable|timed out|could not connect|max retries exceeded|proxyerror|ssl",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Env:
    venv: Path
    python: Path
    bin: Path
    cached: bool
    duration: float
    tool: str  # "uv" | "pip"


def default_cache_root() -> Path:
    """Where environments are cached. As root, a folder the sandbox's unprivileged user can enter."""
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "cassette-grader"
    # Root's home is usually 0700: a venv under it would force the sandbox to keep running as root.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/cache/cassette-grader")
    return Path.home() / ".cache" / "cassette-grader"


# --- reading the dependency spec -------------------------------------------------------------------------


def _is_unsafe_requirement(line: str) -> bool:
    """A local path, a URL or an editable: not fetched from the index, so not installed."""
    text = line.strip()
    if text.startswith((".", "/", "~", "-e", "--editable")) or "://" in text or text.startswith("file:"):
        return True
    return bool(re.match(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?\s*@", text))  # "name @ url"


def _from_requirements_file(path: Path, repo: Path, seen: set[Path]) -> Iterator[str]:
    real = Path(os.path.realpath(path))
    if real in seen:
        return
    seen.add(real)
    try:
        text = real.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ", "-r", "-c ")):
            if line.startswith("-c"):
                continue  # constraints narrow versions only; the resolver does fine without them
            target = line.split(None, 1)[1] if " " in line else line[2:]
            nested = Path(os.path.realpath(real.parent / target.strip()))
            # Only files inside the repo: a -r must not read the grader's machine.
            if nested.is_relative_to(repo) and nested.is_file():
                yield from _from_requirements_file(nested, repo, seen)
            continue
        if line.startswith("-") or _is_unsafe_requirement(line):
            continue  # index options, hashes, editables, paths: the submission runs from its checkout
        yield line


def _dependency_group(groups: dict, name: str, depth: int = 0) -> Iterator[str]:
    if depth > 10:
        return
    for item in groups.get(name) or []:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
            yield from _dependency_group(groups, item["include-group"], depth + 1)


def read_requirements(repo: Path) -> list[str]:
    """The submission's requirements, statically: pyproject first, else the requirements files.

    Local paths, URLs and editables are left out (the submission runs from its checkout; installs come
    from the index only). The grader's own ``pytest`` and ``pytest-socket`` are always added.
    """
    repo = Path(os.path.realpath(repo))
    reqs: list[str] = []
    pyproject = repo / "pyproject.toml"
    data: dict = {}
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
            data = {}
    project = data.get("project") if isinstance(data.get("project"), dict) else {}
    declared = isinstance(project.get("dependencies"), list) or isinstance(
        project.get("optional-dependencies"), dict
    )
    if isinstance(project.get("dependencies"), list):
        reqs += [r for r in project["dependencies"] if isinstance(r, str)]
    extras = project.get("optional-dependencies")
    if isinstance(extras, dict):
        for group in _EXTRA_GROUPS:
            if isinstance(extras.get(group), list):
                reqs += [r for r in extras[group] if isinstance(r, str)]
    groups = data.get("dependency-groups")
    if isinstance(groups, dict):
        declared = True
        for group in _EXTRA_GROUPS:
            reqs += list(_dependency_group(groups, group))
    if not declared:
        seen: set[Path] = set()
        for name in _REQUIREMENT_FILES:
            if (repo / name).is_file():
                reqs += list(_from_requirements_file(repo / name, repo, seen))
    own = {_name(r) for r in reqs}
    reqs = [r.strip() for r in reqs if r.strip() and not _is_unsafe_requirement(r)]
    # A submission's self-reference (an extra pulling in its own project) cannot come from the index.
    self_name = _name(str(project.get("name", ""))) if project.get("name") else None
    reqs = [r for r in reqs if _name(r) != self_name]
    reqs += [r for r in GRADER_REQUIREMENTS if _name(r) not in own]
    return sorted(set(reqs))


def _name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else requirement.strip().lower()


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


def _cache_key(requirements: list[str], python: Path) -> str:
    payload = {
        "format": ENV_FORMAT,
        "grader_modules": audit.installed_digest(),
        "requirements": requirements,
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


def _failure(
    step: str, tool: str, result: sandbox.RunResult, requirements: list[str], cache_root: Path
) -> NotAssessable:
    output = result.stderr + "\n" + result.stdout
    if result.timed_out:
        head = f"installing the submission's dependencies with {tool} timed out (step: {step})"
    elif no_space_text(output):
        # Every file an install writes (venv, tool caches, build temp) is under the cache root.
        full = no_space_reason("environment cache", cache_root)
        head = f"{full}; installing with {tool} failed (step: {step})"
    elif _NETWORK_TROUBLE.search(output) and not re.search(
        r"not found in the package registry|no solution found|could not find a version", output, re.IGNORECASE
    ):
        head = (
            f"package index unreachable while installing with {tool} "
            f"(an infrastructure problem, not the submission's; exit {result.returncode})"
        )
    elif step == "venv":
        head = f"cannot create a venv with {tool} (exit {result.returncode})"
    else:
        head = (
            f"the submission's dependencies cannot be installed ({tool} exit {result.returncode}; "
            f"requirements: {', '.join(requirements)})"
        )
    tail = _tail(output)
    return NotAssessable(f"{head}\n{tail}" if tail else head)


def _build(target: Path, requirements: list[str], cache_root: Path, timeout: float) -> str:
    """Build the venv at ``target``; returns the tool used. Raises NotAssessable."""
    uv = _uv_bin()
    home = Path(tempfile.mkdtemp(prefix=".home-", dir=cache_root))
    home.chmod(0o755)
    try:
        req_file = home / "requirements.txt"
        req_file.write_text("\n".join(requirements) + "\n", encoding="utf-8")
        base = _base_python()
        target.mkdir()
        uv_cache = cache_root / "uv-cache"
        pip_cache = cache_root / "pip-cache"
        for d in (uv_cache, pip_cache):
            d.mkdir(exist_ok=True)
        env = {
            "UV_CACHE_DIR": str(uv_cache),
            "PIP_CACHE_DIR": str(pip_cache),
            "UV_PYTHON_DOWNLOADS": "never",
            # Copies, not hardlinks into the shared cache: a later install running as the same
            # unprivileged user must not be able to reach a finished venv's files through the cache.
            "UV_LINK_MODE": "copy",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        # Writable by the install only; the sandbox hands them back to the grader afterwards, so the finished
        # venv and the shared caches are not writable by later submissions.
        writable = [target, uv_cache, pip_cache]
        # The installer and the base Python may live outside the system folders the sandbox shows.
        readable = [Path(p) for p in (uv, base) if p]

        def step(argv: list[str], **more: str) -> sandbox.RunResult:
            return sandbox.run(
                argv,
                cwd=home,
                home=home,
                timeout=timeout,
                network=True,
                env={**env, **more},
                writable=writable,
                readable=readable,
            )

        tool = "uv"
        result = None
        if uv is not None:
            result = step([uv, "venv", "--quiet", "--allow-existing", "--python", str(base), str(target)])
            if result.returncode != 0 and no_space_text(result.stderr + result.stdout):
                raise _failure("venv", tool, result, requirements, cache_root)  # pip would not fit either
        if uv is None or result is None or result.returncode != 0:
            # uv could not run here (missing binary, unsupported platform): the standard library's way.
            tool = "pip"
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            result = step([str(base), "-m", "venv", str(target)])
            if result.returncode != 0:
                raise _failure("venv", tool, result, requirements, cache_root)
        python = target / "bin" / "python"
        # Bytecode is compiled here, once: the sandbox user cannot write the venv, so without it every run
        # would compile pytest and the dependencies again (pip compiles by default; uv only when asked).
        if tool == "uv":
            argv = [uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python)]
            argv += ["-r", str(req_file)]
        else:
            argv = [str(python), "-m", "pip", "install", "--quiet", "-r", str(req_file)]
        result = step(argv)
        if result.returncode != 0:
            raise _failure("install", tool, result, requirements, cache_root)
        # The hook is imported at every start-up; a failed compile only costs speed.
        step([str(python), "-m", "compileall", "-q", *map(str, audit.install_into(target))])
        step(_rewrite_warmup(python, home), PYTHONDONTWRITEBYTECODE="")  # the sandbox's default is "1"
        (target / _MARKER).write_text(json.dumps({"requirements": requirements, "tool": tool}) + "\n")
        return tool
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _rewrite_warmup(python: Path, home: Path) -> list[str]:
    """A pytest start-up in an empty folder, so pytest caches its rewritten plugin modules in the venv.

    pytest rewrites the asserts of every plugin module it loads (a whole distribution's when the plugin
    comes from an entry point) and caches the result beside the module, but the sandbox user cannot write
    the venv: without this, every suite run (the canary's record run too) rewrote anyio's and pytest-socket's
    modules again. It loads what a run loads: the entry-point plugins and ``-p _grader_pytest``. It collects
    nothing (exit 5), reads nothing from the checkout, and its outcome is ignored: a failure only costs speed.
    """
    ini = home / "warmup.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    return [
        str(python), "-m", "pytest", "--collect-only", "-q", "-c", str(ini), "--rootdir", str(home),
        "-p", "no:cacheprovider", "-p", "_grader_pytest", str(home),
    ]  # fmt: skip


def ensure_env(repo: Path, *, cache_root: Path, timeout: float) -> Env:
    """The submission's venv, built once per distinct dependency set; raises NotAssessable on failure.

    The grader's own disk or cache folder failing (ENOSPC, a cache path that is a file, no permission) is
    NotAssessable too, with the reason: ``no space left on device: environment cache <folder> ...``.
    """
    cache_root = Path(cache_root)
    try:
        return _ensure_env(repo, cache_root=cache_root, timeout=timeout)
    except OSError as exc:
        if no_space(exc):
            raise NotAssessable(no_space_reason("environment cache", cache_root)) from None
        what = exc.strerror or type(exc).__name__
        where = f" ({exc.filename})" if exc.filename else ""
        raise NotAssessable(f"cannot use the environment cache {cache_root}: {what}{where}") from None


def _ensure_env(repo: Path, *, cache_root: Path, timeout: float) -> Env:
    start = time.monotonic()
    requirements = read_requirements(repo)
    cache_root.mkdir(parents=True, exist_ok=True)
    key = _cache_key(requirements, _base_python())
    target = cache_root / key
    # Concurrent grades of submissions with the same dependencies: one builds, the others wait and reuse.
    with open(cache_root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = (target / _MARKER).is_file()
        tool = "uv"
        if cached:
            try:
                tool = json.loads((target / _MARKER).read_text())["tool"]
            except (OSError, ValueError, KeyError, TypeError):
                tool = "uv"
        else:
            shutil.rmtree(target, ignore_errors=True)  # an earlier build that died half-way
            try:
                tool = _build(target, requirements, cache_root, timeout)
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
    return Env(
        venv=target,
        python=target / "bin" / "python",
        bin=target / "bin",
        cached=cached,
        duration=time.monotonic() - start,
        tool=tool,
    )
