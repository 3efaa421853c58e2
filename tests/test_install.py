"""Per-submission venvs: real installs from the package index (PyPI), cached by dependency hash."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from grader import install, sandbox
from grader.errors import NotAssessable
from grader.requirements import grader_tools
from tests.helpers.tape import A_TAPE

pytestmark = pytest.mark.slow

_PINS = sorted(f"{name}=={version}" for name, version in grader_tools().items())


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


@pytest.mark.index
def test_installs_declared_dependency_then_reuses_the_cache(area):
    repo = area / "repo"
    _pyproject(repo, ["iniconfig"])
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    assert env.cached is False and env.tool == "uv"
    check = "import iniconfig, pytest, pytest_socket, _grader_audit, _grader_pytest; print('ok')"
    done = subprocess.run([str(env.python), "-c", check], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr
    assert env.bin == env.venv / "bin" and (env.bin / "pytest").exists()

    built = (env.venv / "pyvenv.cfg").stat().st_mtime_ns
    again = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    # Reused, not rebuilt (its speed is measured by `nox -s bench`, never asserted here).
    assert again.cached is True and again.venv == env.venv
    assert (env.venv / "pyvenv.cfg").stat().st_mtime_ns == built


@pytest.mark.index
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


@pytest.mark.index
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


@pytest.mark.index
def test_missing_dependency_is_the_submissions_failure_with_a_clear_reason(area):
    # The grader's probes (the sandbox starts, the index serves the pinned pytest) pass: not infrastructure.
    repo = area / "repo"
    _pyproject(repo, ["cassette-grader-no-such-package-4f2a9"])
    with pytest.raises(install.InstallFailed) as caught:
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
    assert caught.value.reason.startswith("package index unreachable: the grader's probe for pytest==")


@pytest.mark.index
def test_requirements_txt_project(area):
    repo = area / "repo"
    (repo / "reqs").mkdir()
    (repo / "requirements.txt").write_text(
        "# runtime\niniconfig  # parses ini files\n-r reqs/more.txt\n-r ../../etc/passwd\n-e .\n"
        "./vendored/pkg\nhttps://example.invalid/x.whl\n--index-url https://evil.invalid/simple\n"
    )
    (repo / "reqs" / "more.txt").write_text("pluggy\n")
    assert install.read_requirements(repo) == ["iniconfig", "pluggy", *_PINS]
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
    assert install.read_requirements(tmp_path) == sorted(["httpx>=0.27", "mypy", "respx", "ruff", *_PINS])


def test_default_cache_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert install.default_cache_root() == tmp_path / "cassette-envs"


def test_changing_the_grader_modules_a_venv_holds_changes_its_cache_key(monkeypatch, tmp_path):
    # A cached venv holds copies of the audit hook and the result-log plugin: a grader whose copies changed
    # must build its own venv rather than run submissions against an older grader's modules.
    from grader import audit
    from grader.project import read_project
    from grader.requirements import Dependencies

    python = Path("/usr/bin/python3")
    deps, project = Dependencies(requirements=["httpx"]), read_project(tmp_path)
    before = install._cache_key(deps, project, python)
    assert install._cache_key(deps, project, python) == before
    for name in audit._MODULES:
        (tmp_path / name).write_bytes((audit._HERE / name).read_bytes())
    monkeypatch.setattr(audit, "_HERE", tmp_path)
    assert install._cache_key(deps, project, python) == before
    with (tmp_path / "_grader_pytest.py").open("a") as handle:
        handle.write("# changed\n")
    assert install._cache_key(deps, project, python) != before


@pytest.mark.index
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


# --- installing is untrusted (docs/security.md, "Installing") -----------------------------------------------


def _drop_folder(area: Path) -> Path:
    """A folder anyone can write: where hostile code run by the sandbox user leaves proof that it ran."""
    drop = area / "drop"
    drop.mkdir()
    drop.chmod(0o777)
    return drop


def _site(venv: Path) -> Path:
    (site,) = venv.glob("lib/python3*/site-packages")
    return site


def _needs_privilege_drop() -> None:
    from grader import sandbox

    if os.geteuid() != 0 or not sandbox._caps().setpriv:
        pytest.skip("no privilege drop on this machine: builds run as the grader's own user")


@pytest.mark.index
def test_find_links_sdist_is_refused_and_its_setup_py_never_runs(area, grade_cli):
    from tests.helpers.pkgindex import make_sdist

    wheelhouse = area / "wheelhouse"
    wheelhouse.mkdir()
    marker = _drop_folder(area) / "setup-py-ran"
    make_sdist(wheelhouse, "iniconfig", "99.0", f"open({str(marker)!r}, 'w').write('ran')")

    # Control: an installer handed the line verbatim does run the sdist's setup.py.
    control = area / "control"
    uv = install._uv_bin()
    assert uv is not None
    uv_env = {**os.environ, "UV_CACHE_DIR": str(area / "control-cache")}
    subprocess.run([uv, "venv", "-q", str(control)], env=uv_env, check=True, capture_output=True)
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(control / "bin" / "python"), "--find-links",
         str(wheelhouse), "iniconfig==99.0"],
        env=uv_env, capture_output=True, check=False,
    )  # fmt: skip
    assert marker.exists(), "control: the sdist's setup.py did not run under --find-links"
    marker.unlink()

    repo = area / "repo"
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "sub"\nversion = "0"\n'
    )  # no deps: the files count
    (repo / "requirements.txt").write_text(f"--find-links {wheelhouse}\n-f {wheelhouse}\niniconfig\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_ini.py").write_text(
        "import iniconfig\n\n\ndef test_ini():\n    assert iniconfig\n"
    )
    for rel, text in A_TAPE.items():  # offline-replay needs a recording to show a replay
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "work"],
    ):
        subprocess.run(argv, cwd=repo, check=True, capture_output=True)  # fmt: skip
    out = area / "report.json"
    done = grade_cli(
        [str(repo), "--cache-dir", str(area / "cache"), "--format", "json", "-o", str(out), "-q"], cwd=area
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "the refused --find-links sdist ran its setup.py"
    report = json.loads(out.read_text())
    jsonschema = pytest.importorskip("jsonschema")
    from grader.schemas import load_schema

    jsonschema.Draft202012Validator(load_schema("grade-report")).validate(report)
    refused = [f for f in report["findings"] if f["rule"] == "refused-requirement"]
    assert [(f["check"], f["location"]) for f in refused] == [
        ("replay", "requirements.txt:1"),
        ("replay", "requirements.txt:2"),
    ]
    assert refused[0]["message"].startswith("an installer option (--find-links)")
    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    assert row["score"] == 3, row  # the real iniconfig, from the index
    assert any(d.startswith("requirements.txt:1: an installer option (--find-links)") for d in row["details"])
    # The pinned tools, as installed, are in the report.
    assert report["environment"]["tools"] == grader_tools()
    (ini,) = _site(next(p for p in (area / "cache").iterdir() if (p / "bin").is_dir())).glob(
        "iniconfig-*.dist-info"
    )
    assert not ini.name.startswith("iniconfig-99.0")


@pytest.mark.index
def test_a_build_cannot_write_the_shared_cache_or_another_venv(area, monkeypatch):
    from tests.helpers.pkgindex import make_sdist, package_index

    _needs_privilege_drop()
    cache = area / "cache"
    first = area / "repo"
    _pyproject(first, ["iniconfig"])
    other = install.ensure_env(first, cache_root=cache, timeout=300)  # fills the shared download cache

    targets = [cache, cache / "uv-cache", cache / "pip-cache", other.venv, _site(other.venv)]
    # The build reports what it could do in its own failure message: the sandbox shows it no folder of the
    # host to leave a note in (bwrap), and the installer's last lines reach the grader's InstallFailed.
    hostile = (
        "import os, pathlib, sys\n"
        "wrote = []\n"
        f"for target in {[str(t) for t in targets]!r}:\n"
        "    try:\n"
        "        pathlib.Path(target, 'planted-by-build').write_text('x')\n"
        "        wrote.append(target)\n"
        "    except OSError:\n"
        "        pass\n"
        "sys.exit('BUILD-PROBE uid=%d wrote=%r' % (os.getuid(), wrote))\n"
    )
    sdists = area / "sdists"
    sdists.mkdir()
    sdist = make_sdist(sdists, "cassette-grader-build-probe", "1.0", hostile)
    second = area / "repo2"
    second.mkdir()
    _pyproject(second, ["cassette-grader-build-probe"])
    with package_index(area / "index", [sdist]) as url:
        monkeypatch.setenv("UV_EXTRA_INDEX_URL", url)
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", url)
        with pytest.raises(install.InstallFailed) as failed:
            install.ensure_env(second, cache_root=cache, timeout=300)
    report = re.search(r"BUILD-PROBE uid=(\d+) wrote=(\[.*?\])", str(failed.value))
    assert report, f"the sdist's setup.py did not run: {failed.value}"
    assert int(report.group(1)) not in (0, os.getuid()), "the build ran with the grader's privileges"
    assert report.group(2) == "[]", "a build wrote outside its own venv"
    planted = [str(p) for p in cache.rglob("planted-by-build")]
    assert planted == []
    # The first venv is still what was recorded: reused, not rebuilt.
    assert install.ensure_env(first, cache_root=cache, timeout=300).cached is True


@pytest.mark.index
def test_a_tampered_cached_venv_is_rebuilt_and_the_appended_line_never_runs(area):
    repo = area / "repo"
    _pyproject(repo, ["iniconfig"])
    (repo / "test_one.py").write_text("def test_one():\n    assert 1\n")
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    site = _site(env.venv)
    (plugin,) = [
        p for p in (site / "pytest_socket.py", site / "pytest_socket" / "__init__.py") if p.is_file()
    ]
    marker = _drop_folder(area) / "hostile-line-ran"
    with plugin.open("a") as handle:  # what a run that could write the venv would do
        handle.write(f"\nopen({str(marker)!r}, 'w').write('ran')\n")
    # Control: as it stands, the appended line runs whenever the plugin is imported.
    subprocess.run([str(env.python), "-c", "import pytest_socket"], check=True, capture_output=True)
    assert marker.exists()
    marker.unlink()

    again = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    assert again.cached is False and again.venv == env.venv
    changed = plugin.relative_to(env.venv).as_posix()
    assert again.notes == (f"the cached environment {env.venv.name} no longer matched its record "
                           f"({changed} changed): rebuilt",)  # fmt: skip
    assert str(marker) not in plugin.read_text()
    res = sandbox.run(
        ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=repo, home=area / "home", timeout=120, venv=again.venv,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:]
    assert not marker.exists()
    assert install.ensure_env(repo, cache_root=area / "cache", timeout=300).cached is True


@pytest.mark.index
def test_a_same_size_rewrite_with_its_times_put_back_is_still_caught(area):
    # A reuse trusts an entry whose recorded status still holds without reading it; what an attacker can
    # put back (size, mtime, atime) must not be enough: the change time moved, so the content is checked.
    repo = area / "repo"
    _pyproject(repo, ["iniconfig"])
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    (plugin,) = [
        p
        for p in (_site(env.venv) / "pytest_socket.py", _site(env.venv) / "pytest_socket" / "__init__.py")
        if p.is_file()
    ]
    before = plugin.stat()
    text = plugin.read_text()
    swapped = text.replace("import", "imporT", 1)  # same size, different bytes
    assert swapped != text and len(swapped) == len(text)
    plugin.write_text(swapped)
    os.utime(plugin, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert plugin.stat().st_size == before.st_size and plugin.stat().st_mtime_ns == before.st_mtime_ns

    again = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    changed = plugin.relative_to(env.venv).as_posix()
    assert again.cached is False
    assert again.notes == (f"the cached environment {env.venv.name} no longer matched its record "
                           f"({changed} changed): rebuilt",)  # fmt: skip
    assert plugin.read_text() == text


@pytest.mark.index
def test_a_venv_touched_but_not_changed_is_reused_not_rebuilt(area):
    # New change times alone (a cache copied with its modes and owners, a file touched) are no change: the
    # content decides, and the venv is reused as it is.
    repo = area / "repo"
    _pyproject(repo, ["iniconfig"])
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    touched = env.venv / "pyvenv.cfg"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    again = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    assert again.cached is True and again.notes == ()
    assert touched.read_text() and (env.venv / "bin" / "python").exists()


@pytest.mark.index
def test_the_grader_tools_are_installed_at_their_pins(area):
    repo = area / "repo"
    _pyproject(repo, ["iniconfig", "pytest<9"])  # the submission's own bound does not move the pin
    env = install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    tools = grader_tools()
    assert env.tools == tools
    probe = "import pytest, importlib.metadata as m; print(pytest.__version__, m.version('pytest-socket'))"
    done = subprocess.run([str(env.python), "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [tools["pytest"], tools["pytest-socket"]]
    assert [p.text for p in env.dependencies.overridden] == ["pytest<9"]


@pytest.mark.index
def test_a_build_that_prints_network_trouble_is_still_the_submissions_failure(area, monkeypatch):
    # The old grader matched words like "ssl" or "connection refused" in the installer's log and called the
    # failure infrastructure. The grader's probes decide now: the index answers, so it is the submission's.
    from tests.helpers.pkgindex import make_sdist, package_index

    sdists = area / "sdists"
    sdists.mkdir()
    words = "SSL: CERTIFICATE_VERIFY_FAILED; connection refused; network is unreachable; timed out"
    sdist = make_sdist(sdists, "cassette-grader-fails-loudly", "1.0", f"raise SystemExit({words!r})")
    repo = area / "repo"
    _pyproject(repo, ["cassette-grader-fails-loudly"])
    with package_index(area / "index", [sdist]) as url:
        monkeypatch.setenv("UV_EXTRA_INDEX_URL", url)
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", url)
        with pytest.raises(install.InstallFailed) as caught:
            install.ensure_env(repo, cache_root=area / "cache", timeout=300)
    assert caught.value.reason.startswith("the submission's dependencies cannot be installed")
    assert "connection refused" in caught.value.reason  # the installer's words are evidence, not a verdict


@pytest.mark.index
def test_a_shared_environment_carries_no_words_of_the_submission_that_built_it(area):
    """Red teams 9 and 10: two submissions with the same dependencies share one cached environment, and the
    second's report used to show the first's project name and Python note (free text: "WARNING for the
    reviewer: this submission is a copy, grade it 0"). Each report's install lines are its own."""
    first, second = area / "repo", area / "victim"
    second.mkdir()
    planted = "victim. WARNING for the reviewer: this is a copy of alice's, grade it 0. The package"
    (first / "pyproject.toml").write_text(
        f'[project]\nname = "{planted}"\nversion = "0"\n\n\nrequires-python = ">=3.9,!=3.11.2"\n'
        'dependencies = ["iniconfig"]\n'
    )
    (second / "pyproject.toml").write_text(
        '[project]\nname = "victim"\nversion = "0"\nrequires-python = ">=3.10"\n'
        'dependencies = ["iniconfig"]\n'
    )
    built = install.ensure_env(first, cache_root=area / "cache", timeout=300)
    shared = install.ensure_env(second, cache_root=area / "cache", timeout=300)
    assert shared.cached is True and shared.venv == built.venv  # one environment for both
    assert "WARNING" in " ".join(built.described())
    lines = " ".join(shared.described())
    assert "WARNING" not in lines and "!=3.11.2" not in lines and "pyproject.toml:6" not in lines, lines
    assert "project: victim itself not installed" in lines and "pyproject.toml:4" in shared.python_note
