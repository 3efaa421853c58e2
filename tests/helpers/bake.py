"""Bake the candidate template, give the baked project a venv, and run the stand-in model server.

Real parts only: cookiecutter's own API, a real venv (uv), a real ``python -m grader.standin`` subprocess.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cookiecutter.main import cookiecutter

from tests.helpers.processes import end_group

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template"
_CREDENTIAL = re.compile(r".*(_API_KEY|_TOKEN)$|^(OPENAI|ANTHROPIC)_.*")


def bake(output_dir: Path, **answers: str) -> Path:
    """Bake the template without prompts; returns the project directory."""
    return Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(output_dir), extra_context=answers))


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment minus anything credential-like, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not _CREDENTIAL.match(k.upper())}
    env.pop("CASSETTE_MODE", None)
    env.pop("CASSETTE_MISS_LOG", None)
    env.pop("CASSETTE_USED_LOG", None)
    env.pop("PYTEST_ADDOPTS", None)
    env.update(extra)
    return env


@dataclass(frozen=True)
class BakedVenv:
    bin: Path
    note: str  # how it was built, printed by tests so a fallback is visible

    def env(self, **extra: str) -> dict[str, str]:
        """A clean environment whose ``python`` and ``make`` see this venv first."""
        return clean_env(PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", **extra)


@cache
def baked_venv() -> BakedVenv:
    """One venv per test session holding what a baked project declares (httpx, pytest, pytest-socket).

    The baked project itself runs from its checkout (pytest ``pythonpath``; ``python -m`` from the repo root),
    exactly as the grader runs submissions, so one venv serves every bake.
    """
    root = Path(tempfile.mkdtemp(prefix="kit-baked-venv-"))
    atexit.register(shutil.rmtree, root, True)
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    venv = root / "venv"
    requirements = root / "requirements.txt"
    requirements.write_text("httpx>=0.27\npytest>=8\npytest-socket>=0.7\n")
    try:
        subprocess.run(
            [uv, "venv", "-q", "--python", sys.executable, str(venv)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "-r", str(requirements)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        return BakedVenv(venv / "bin", "uv venv")
    except (OSError, subprocess.SubprocessError) as exc:
        # No package index reachable: the kit's own venv already holds the same three packages.
        return BakedVenv(Path(sys.executable).parent, f"kit venv (uv install failed: {exc})")


def run(
    argv: list[str], cwd: Path, env: dict[str, str], *, offline: bool = False, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run a command; ``offline`` puts it in a fresh network namespace when the kernel allows it."""
    if offline and unshare_works():
        argv = ["unshare", "-n", *argv]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@cache
def unshare_works() -> bool:
    try:
        ok = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if not ok:
        print("unshare -n refused: offline runs rely on pytest-socket alone", file=sys.stderr)
    return ok


@contextmanager
def standin(*args: str) -> Iterator[str]:
    """Run ``python -m grader.standin --port 0`` as a subprocess; yields its base URL (``.../v1``)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader.standin", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
        start_new_session=True,  # its own group, ended as a whole
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"stand-in did not print its URL (got {url!r}, exit {proc.poll()})")
        yield url
    finally:
        end_group(proc)


def record_with_standin(repo: Path) -> subprocess.CompletedProcess[str]:
    """The repository's own `make record` against a fresh stand-in (a placeholder key, this Python)."""
    with standin() as base_url:
        env = clean_env(
            PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin",
            OPENAI_API_KEY="rerecord-test-key",
            OPENAI_BASE_URL=base_url,
        )
        return run(["make", "record", f"PYTHON={sys.executable}"], repo, env)


def files_containing(root: Path, needle: str) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``needle``."""
    data = needle.encode()
    return [p for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]
