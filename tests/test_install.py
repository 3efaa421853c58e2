"""Per-submission venvs: real installs from the package index (PyPI), cached by dependency hash."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from grader import install
from grader.errors import NotAssessable

pytestmark = pytest.mark.slow


@pytest.fixture
def area():
    """World-traversable (as root the install runs as `nobody`, which cannot enter pytest's 0700 tmp_path)."""
    path = Path(tempfile.mkdtemp(prefix="install-test-"))
    path.chmod(0o755)
    (path / "repo").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _pyproject(repo: Path, deps: list[str], extra: str = "") -> None:
    listed = ", ".join(f'"{d}"' for d in deps)
    (repo / "pyproject.toml").write_text(
        f'[project]\nname = "sub"\nversion = "0"\ndependencies = [{listed}]\n{extra}'
    )


def test_installs_declared_dependency_then_reuses_the_cache(area):
    repo = area / "repo"
    _pyproject(repo, ["iniconfig"])
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    assert env.cached is False and env.tool == "uv"
    check = "import iniconfig, pytest, pytest_socket, _grader_audit, _grader_pytest; print('ok')"
    done = subprocess.run([str(env.python), "-c", check], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr
    assert env.bin == env.venv / "bin" and (env.bin / "pytest").exists()

    start = time.monotonic()
    again = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    assert again.cached is True and again.venv == env.venv
    assert time.monotonic() - start < 1.0


def test_cached_venv_is_not_writable_by_submission_code(area):
    from grader import sandbox

    repo = area / "repo"
    _pyproject(repo, ["iniconfig"])
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    res = sandbox.run(
        ["sh", "-c", 'echo evil > "$VIRTUAL_ENV/bin/pytest"'],
        cwd=repo,
        home=area / "home",
        timeout=30,
        venv=env.venv,
    )
    if res.user != "unprivileged" and sandbox.isolation().filesystem != "bwrap":
        pytest.skip("neither a privilege drop nor bwrap on this machine: the venv is writable")
    assert res.returncode != 0
    assert "evil" not in (env.bin / "pytest").read_text()


def test_sandboxed_runs_load_compiled_bytecode_from_the_cached_venv(area):
    # The sandbox user cannot write the venv: without bytecode compiled at install, every run of the
    # submission's code would compile pytest, the dependencies and the audit hook again.
    from grader import sandbox

    repo = area / "repo"
    _pyproject(repo, ["iniconfig"])
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    res = sandbox.run(
        ["python", "-v", "-c", "import iniconfig, pytest, _grader_pytest"],
        cwd=repo,
        home=area / "home",
        timeout=60,
        venv=env.venv,
        audit_log=area / "logs" / "audit.jsonl",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    venv_lines = [line for line in res.stderr.splitlines() if str(env.venv) in line]
    # `python -v`: "# <pyc> matches <source>" when the bytecode is used, "# code object from <source>.py"
    # when the source had to be compiled.
    compiled = [x for x in venv_lines if x.startswith("# code object from ") and x.endswith(".py")]
    assert compiled == []
    used = {line.rsplit(" matches ", 1)[1] for line in venv_lines if " matches " in line}
    for module in ("iniconfig/__init__.py", "pytest/__init__.py", "_grader_audit.py", "_grader_pytest.py"):
        assert any(path.endswith(f"site-packages/{module}") for path in used), module


def test_missing_dependency_is_not_assessable_with_a_clear_reason(area):
    repo = area / "repo"
    _pyproject(repo, ["cassette-grader-no-such-package-4f2a9"])
    with pytest.raises(NotAssessable) as caught:
        install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    first, _, tail = caught.value.reason.partition("\n")
    assert first.startswith("the submission's dependencies cannot be installed")
    assert "cassette-grader-no-such-package-4f2a9" in first
    assert tail  # the installer's own words follow
    # Nothing half-built is left to be mistaken for a cached venv.
    assert not any(p.is_dir() and len(p.name) == 32 for p in (area / "cache").iterdir())


def test_unreachable_index_is_reported_as_infrastructure(area, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("UV_DEFAULT_INDEX", f"http://127.0.0.1:{port}/simple")
    monkeypatch.setenv("UV_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    repo = area / "repo"
    _pyproject(repo, ["cassette-grader-unreachable-7c1"])
    with pytest.raises(NotAssessable) as caught:
        install.ensure_env(repo, cache_root=area / "cache", timeout=120)
    assert caught.value.reason.startswith("package index unreachable")


def test_requirements_txt_project(area):
    repo = area / "repo"
    (repo / "reqs").mkdir()
    (repo / "requirements.txt").write_text(
        "# runtime\niniconfig  # parses ini files\n-r reqs/more.txt\n-r ../../etc/passwd\n-e .\n"
        "./vendored/pkg\nhttps://example.invalid/x.whl\n--index-url https://evil.invalid/simple\n"
    )
    (repo / "reqs" / "more.txt").write_text("pluggy\n")
    assert install.read_requirements(repo) == ["iniconfig", "pluggy", "pytest", "pytest-socket"]
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    done = subprocess.run(
        [str(env.python), "-c", "import iniconfig, pluggy"], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_reads_test_extras_and_dependency_groups(tmp_path):
    _pyproject(
        tmp_path,
        ["httpx>=0.27", "sub[test]"],
        '[project.optional-dependencies]\ntest = ["respx"]\ndocs = ["sphinx"]\n'
        '[dependency-groups]\nlint = ["ruff"]\ndev = [{include-group = "lint"}, "mypy"]\n',
    )
    (tmp_path / "requirements.txt").write_text("ignored-when-pyproject-declares\n")
    assert install.read_requirements(tmp_path) == [
        "httpx>=0.27",
        "mypy",
        "pytest",
        "pytest-socket",
        "respx",
        "ruff",
    ]


def test_default_cache_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert install.default_cache_root() == tmp_path / "cassette-grader"


def test_changing_the_grader_modules_a_venv_holds_changes_its_cache_key(monkeypatch, tmp_path):
    # A cached venv holds copies of the audit hook and the result-log plugin: a grader whose copies changed
    # must build its own venv rather than run submissions against an older grader's modules.
    from grader import audit

    python = Path("/usr/bin/python3")
    before = install._cache_key(["httpx"], python)
    assert install._cache_key(["httpx"], python) == before
    for name in audit._MODULES:
        (tmp_path / name).write_bytes((audit._HERE / name).read_bytes())
    monkeypatch.setattr(audit, "_HERE", tmp_path)
    assert install._cache_key(["httpx"], python) == before
    with (tmp_path / "_grader_pytest.py").open("a") as handle:
        handle.write("# changed\n")
    assert install._cache_key(["httpx"], python) != before


def test_suite_runs_use_plugin_modules_pytest_rewrote_at_install(area):
    # pytest rewrites every plugin module it loads; the sandbox user cannot cache that in the venv, so the
    # install does it once and each run reads the cached result ("found cached rewritten pyc").
    from grader import sandbox

    repo = area / "repo"
    _pyproject(repo, ["iniconfig"])
    (repo / "test_one.py").write_text("def test_one():\n    assert 1\n")
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    res = sandbox.run(
        ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_grader_pytest"],
        cwd=repo,
        home=area / "home",
        timeout=60,
        venv=env.venv,
        env={"PYTEST_DEBUG": "1"},
    )
    assert res.returncode == 0, res.stdout[-2000:]
    # PYTEST_DEBUG trace lines: "  found cached rewritten pyc for <path> [assertion]"
    traced = [line for line in res.stderr.splitlines() if "found cached rewritten pyc for " in line]
    cached = {line.split(" for ", 1)[1].removesuffix("[assertion]").strip() for line in traced}
    for module in ("_grader_pytest.py", "pytest_socket/__init__.py"):
        assert any(path.endswith(f"site-packages/{module}") for path in cached), (module, sorted(cached))
    assert not any(path.endswith("test_one.py") for path in cached)  # never the checkout's own files
