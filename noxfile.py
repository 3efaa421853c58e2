"""Development sessions: `nox -s tests`, `lint`, `template`; `nox -s bench` (benchmarks, never by default)."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "uv|virtualenv"


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite. Offline (no package index): `nox -s tests -- -m "not index"` deselects exactly the
    tests that install an environment; `-m "not slow"` the ones that bake, install or grade whole repos."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format) on everything; mypy --strict on grader/ ([tool.mypy] in pyproject.toml)."""
    session.install("-e", ".", "ruff", "mypy>=1.10", "types-PyYAML", "types-defusedxml")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def template(session: nox.Session) -> None:
    """Bake the template with its defaults and run the baked project's own tests (offline)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "tests/test_template_bake.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks (never default, never in CI): replay, secret scan, grading; writes docs/benchmarks.md.

    `nox -s bench -- --quick` for a short smoke run that writes nothing; `-- --only replay` for one part.
    vcrpy and detect-secrets are the baselines; they are installed here, in this session's venv only.
    """
    session.install("-e", ".[test]", "vcrpy>=6", "detect-secrets>=1.5")
    # An editable grader is compiled on first use, unless PYTHONDONTWRITEBYTECODE is set (as on the shared
    # bench machines): then every timed `grade` would compile it again, which no installed grader does.
    session.run("python", "-m", "compileall", "-q", "grader", "benchmarks")
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(name="rerecord-sample")
def rerecord_sample(session: nox.Session) -> None:
    """Re-record sample_solution's tapes through its own `make record` against the kit's stand-in server.

    The stand-in answers deterministically, so a re-recording reproduces every key and body; only
    `meta.recorded_at` changes, so give the new day in sample_solution/REPLAY.md's recording date: the
    replay-doc row holds it to the tapes' (a day's slack), and the sample must keep that row's full marks.
    """
    import os
    import subprocess
    import sys
    from pathlib import Path

    session.install("-e", ".")
    python = str(Path(session.bin) / ("python.exe" if sys.platform == "win32" else "python"))
    server = subprocess.Popen(
        [python, "-m", "grader.standin", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        base_url = server.stdout.readline().strip()
        env = {
            "OPENAI_API_KEY": "standin-recording-key",  # the stand-in needs a key; it is redacted from tapes
            "OPENAI_BASE_URL": base_url,
            "PATH": f"{session.bin}{os.pathsep}{os.environ['PATH']}",
        }
        session.run("make", "-C", "sample_solution", "record", f"PYTHON={python}", env=env, external=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
