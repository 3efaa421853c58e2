"""Which Python a submission's venv is built on: the one its ``.python-version`` / ``requires-python`` asks
for when this machine has it, else the grader's own, and the evidence line that says which and why.

Only interpreters the sandbox user can execute count (a pyenv under root's 0700 home does not). Nothing is
downloaded (``UV_PYTHON_DOWNLOADS=never``): a Python the machine lacks is reported, not fetched.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from grader import sandbox
from grader._toml import tomllib

__all__ = ["Choice", "choose"]

_TOOLS_FILE = Path(__file__).parent / "rules" / "tools.toml"
_QUERY = "import sys, platform; print('%d.%d.%d' % sys.version_info[:3], platform.python_implementation())"
_GLOBS = ("/usr/bin/python3.*", "/usr/local/bin/python3.*", "/opt/python*/bin/python3.*")


@dataclass(frozen=True)
class Choice:
    """The interpreter chosen, whether it satisfies what the project asks for, and the evidence line.

    ``target``: when it does not satisfy ``requires-python``, the lowest ``X.Y`` that does: the project
    itself (no dependencies, no code run) is installed as for that version, since the installer would
    refuse it otherwise.
    """

    python: Path
    version: str
    satisfied: bool
    note: str
    target: str | None = None


def _minimum() -> Version:
    """The oldest Python the grader's pinned tools run on (``[python] minimum`` in rules/tools.toml)."""
    data = tomllib.loads(_TOOLS_FILE.read_text(encoding="utf-8"))
    return Version(str((data.get("python") or {}).get("minimum", "3.10")))


@cache
def _version(path: str) -> str | None:
    """The CPython version of an interpreter of the machine's (not the submission's), or None."""
    try:
        done = subprocess.run(
            [path, "-I", "-S", "-c", _QUERY], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    version, _, implementation = done.stdout.strip().partition(" ")
    return version if done.returncode == 0 and implementation == "CPython" else None


@cache
def _uv_listed(uv: str | None) -> tuple[str, ...]:
    if uv is None:
        return ()
    try:
        done = subprocess.run(
            [uv, "python", "list", "--only-installed", "--output-format", "json"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
            env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
        )
        listed = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError):
        return ()
    return tuple(str(item["path"]) for item in listed if isinstance(item, dict) and item.get("path"))


def _available(base: Path, uv: str | None) -> list[tuple[Path, str]]:
    """(interpreter, version) the sandbox user can run, the grader's base first, newest after."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    seen: set[str] = set()
    found: list[tuple[Path, str]] = []
    names = [str(base), *sorted(p for g in _GLOBS for p in glob.glob(g)), *_uv_listed(uv)]
    for name in names:
        if name.endswith("-config") or not os.path.isfile(name):
            continue
        real = os.path.realpath(name)
        if real in seen or (root and not sandbox.reachable_by_sandbox_user(Path(name))):
            continue
        seen.add(real)
        version = _version(name)
        if version is not None and Version(version) >= _minimum():
            found.append((Path(name), version))
    head, rest = found[:1], found[1:]
    return head + sorted(rest, key=lambda item: Version(item[1]), reverse=True)


def choose(
    base: Path,
    uv: str | None,
    *,
    requires_python: str | None,
    where: str,
    python_version: str | None,
) -> Choice:
    """The interpreter for a project asking for ``requires_python`` (at ``where``) and ``python_version``."""
    try:
        specifier = SpecifierSet(requires_python or "")
    except InvalidSpecifier:
        specifier = SpecifierSet()
    asked = []
    if requires_python:
        asked.append(f"requires-python {requires_python} ({where})")
    pin = _pinned(python_version)
    if pin:
        asked.append(f".python-version {python_version}")

    def fits(version: str, *, pinned: bool) -> bool:
        if version == "unknown":
            return not requires_python and not (pinned and pin)
        wanted = not pinned or not pin or _matches(version, pin)
        return wanted and specifier.contains(version, prereleases=True)

    # The grader's own interpreter when it will do: no other one is looked for (the common case, and the
    # one a cached venv's reuse must not pay a machine-wide search for).
    own = _version(str(base)) or "unknown"
    if fits(own, pinned=True):
        why = f", satisfies {' and '.join(asked)}" if asked else ""
        return Choice(base, own, True, f"Python {own} ({base}){why}")
    candidates = _available(base, uv) or [(base, own)]
    for path, version in candidates:
        if fits(version, pinned=True):
            why = f", satisfies {' and '.join(asked)}" if asked else ""
            return Choice(path, version, True, f"Python {version} ({path}){why}")
    for path, version in candidates:
        if pin and fits(version, pinned=False):
            why = f", satisfies {asked[0]}" if requires_python else ""
            note = (
                f"Python {version} ({path}){why}; no interpreter on this machine the sandbox can run is "
                f"the {python_version} its .python-version names"
            )
            return Choice(path, version, True, note)
    path, version = candidates[0]
    others = ", ".join(sorted({v for _, v in candidates}, key=Version)) if candidates else "none"
    note = (
        f"Python {version} ({path}): no interpreter on this machine the sandbox can run satisfies "
        f"{' and '.join(asked)} (found {others}); the suite ran on {version} instead"
    )
    return Choice(path, version, False, note, target=_lowest(specifier))


def _pinned(python_version: str | None) -> str | None:
    """``3.12`` from a ``.python-version`` of ``3.12``, ``3.12.1`` or ``cpython-3.12``; None for pypy etc."""
    if not python_version:
        return None
    text = python_version.strip().lower().removeprefix("cpython").lstrip("-@")
    parts = text.split(".")
    if len(parts) >= 2 and all(p.isdigit() for p in parts[:3]):
        return ".".join(parts[:3])
    return None


def _matches(version: str, pin: str) -> bool:
    return version == pin or version.startswith(pin + ".")


def _lowest(specifier: SpecifierSet) -> str | None:
    for minor in range(8, 40):
        if specifier.contains(f"3.{minor}.0", prereleases=True) or specifier.contains(f"3.{minor}.99"):
            return f"3.{minor}"
    return None
