"""Development sessions: `nox -s tests`, `nox -s lint`, `nox -s template`."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "uv|virtualenv"


@nox.session
def tests(session: nox.Session) -> None:
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def template(session: nox.Session) -> None:
    """Bake the template with its defaults and run the baked project's own tests (offline)."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "tests/test_template_bake.py", *session.posargs)
