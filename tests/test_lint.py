"""The kit's own lint gate, as `nox -s lint` runs it: ruff (lint and format) and mypy --strict on grader/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)


def _ruff() -> str:
    return shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")


def test_ruff_check_and_format_are_clean() -> None:
    lint = _run(_ruff(), "check", ".")
    assert lint.returncode == 0, lint.stdout[-4000:]
    fmt = _run(_ruff(), "format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout[-4000:]


def test_mypy_strict_on_the_grader_is_clean() -> None:
    done = _run(sys.executable, "-m", "mypy", "--no-error-summary")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
