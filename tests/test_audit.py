"""The audit hook and the pytest result plugin, run in real interpreters against real sockets and files."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import venv as venv_module
from pathlib import Path

import pytest

from grader import audit, sandbox

AUDIT_DIR = Path(audit.__file__).parent


@pytest.fixture(scope="module")
def audited_venv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("venv") / "v"
    venv_module.EnvBuilder(with_pip=False, symlinks=True).create(path)
    audit.install_into(path)
    return path


def _py(venv: Path) -> str:
    return str(venv / "bin" / "python")


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "cassettes").mkdir()
    (repo / "cassettes" / "triage.json").write_text("{}")
    return repo


_SCRIPT = textwrap.dedent(
    """\
    import socket, sys
    for _ in range(50):
        open("cassettes/triage.json").read()
    open("written.txt", "w").write("x")
    socket.getaddrinfo("localhost", 80)
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", int(sys.argv[1])))
    finally:
        s.close()
    """
)


def test_install_into_places_hook_pth_and_plugin(audited_venv):
    site = next(audited_venv.glob("lib/python3*/site-packages"))
    assert (site / "_grader_audit.pth").read_text() == "import _grader_audit\n"
    assert (site / "_grader_audit.py").is_file() and (site / "_grader_pytest.py").is_file()


def test_hook_is_inert_without_log_variable(audited_venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADER_", "PY_AUDIT_"))}
    done = subprocess.run(
        [_py(audited_venv), "-c", "import sys; print('_grader_audit' in sys.modules)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert done.stdout.strip() == "True"  # loaded by the .pth ...
    assert list(tmp_path.iterdir()) == []  # ... but wrote nothing


def test_hook_logs_network_attempts_and_reads_under_root(audited_venv, tmp_path):
    repo = _repo(tmp_path)
    (repo / "pkg" / "client.py").write_text(_SCRIPT)
    log = tmp_path / "audit.jsonl"
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        env = {**os.environ, "PY_AUDIT_LOG": str(log), "PY_AUDIT_ROOT": str(repo)}
        subprocess.run([_py(audited_venv), "pkg/client.py", str(port)], cwd=repo, env=env, check=True)
    finally:
        server.close()
    result = audit.read_audit_log(log)
    connects = [e for e in result.network_attempts if e.event == "socket.connect"]
    assert [(e.host, e.port, e.where) for e in connects] == [("127.0.0.1", port, "pkg/client.py:8")]
    lookups = [e for e in result.network_attempts if e.event == "socket.getaddrinfo"]
    assert [(e.host, e.where) for e in lookups] == [("localhost", "pkg/client.py:5")]
    assert "cassettes/triage.json" in result.opened
    assert "written.txt" not in result.opened  # writes are not reads
    # Fifty reads of the same file are logged once.
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert sum(1 for x in lines if x.get("path") == "cassettes/triage.json") == 1


_EXISTS_SCRIPT = textwrap.dedent(
    """\
    import os, pathlib, shutil
    assert not os.path.exists("cassettes/missing.json")
    assert not pathlib.Path("cassettes/other.json").is_file()
    assert os.path.exists("cassettes/triage.json")
    os.makedirs("scratch/sub")
    shutil.rmtree("scratch")  # still the fd-based rmtree: the wrapped stat supports dir_fd
    print(os.stat in os.supports_dir_fd, shutil.rmtree.avoids_symlink_attacks)
    """
)


def test_a_stat_of_a_missing_path_under_root_is_a_failed_read(audited_venv, tmp_path):
    """A layer that asks `Path.exists()` before it opens a tape tried the tape (no audit event for a stat)."""
    repo = _repo(tmp_path)
    (repo / "pkg" / "check.py").write_text(_EXISTS_SCRIPT)
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "PY_AUDIT_LOG": str(log), "PY_AUDIT_ROOT": str(repo)}
    done = subprocess.run(
        [_py(audited_venv), "pkg/check.py"], cwd=repo, env=env, check=True, capture_output=True, text=True
    )
    assert done.stdout.split() == ["True", "True"], done.stdout
    result = audit.read_audit_log(log)
    assert {"cassettes/missing.json", "cassettes/other.json"} <= result.opened, result.opened
    assert result.opened_at["cassettes/missing.json"] == {"pkg/check.py:2"}
    assert "cassettes/triage.json" not in result.opened  # a stat that found the file is no read


def test_blocked_connect_inside_the_sandbox_is_still_recorded(audited_venv, tmp_path):
    repo = _repo(tmp_path)
    (repo / "pkg" / "client.py").write_text(_SCRIPT)
    logs = tmp_path / "logs"
    logs.mkdir()
    res = sandbox.run(
        [_py(audited_venv), "pkg/client.py", "9"],
        cwd=repo,
        home=tmp_path / "home",
        timeout=30,
        venv=audited_venv,
        audit_log=logs / "audit.jsonl",
        audit_root=repo,
    )
    assert res.returncode != 0  # nothing listens there (and the namespace has no network)
    result = audit.read_audit_log(logs / "audit.jsonl")
    assert [(e.host, e.port) for e in result.network_attempts if e.event == "socket.connect"] == [
        ("127.0.0.1", 9)
    ]


def test_malformed_audit_lines_are_skipped(tmp_path):
    log = tmp_path / "audit.jsonl"
    good = {"event": "socket.connect", "host": "1.2.3.4", "port": 443, "where": "app.py:3"}
    log.write_text(
        "not json\n"
        + json.dumps(good)
        + "\n[1, 2]\n"
        + '{"event": 5}\n'
        + json.dumps({"event": "open", "path": "c.json", "where": "x:1"})
        + "\n"
        + '{"event": "socket.conn'
    )
    result = audit.read_audit_log(log)
    assert [(e.host, e.port, e.where) for e in result.network_attempts] == [("1.2.3.4", 443, "app.py:3")]
    assert result.opened == {"c.json"}
    assert audit.read_audit_log(tmp_path / "missing.jsonl").network_attempts == []


_SUITE = textwrap.dedent(
    """\
    import pytest

    @pytest.fixture
    def broken():
        raise RuntimeError("fixture exploded")

    def test_pass():
        assert True

    def test_fail():
        assert 1 == 2

    def test_error(broken):
        pass

    def test_skip():
        pytest.skip("not today")

    @pytest.mark.xfail
    def test_xfail():
        assert False

    @pytest.mark.xfail
    def test_xpass():
        assert True

    def test_deselectme():
        assert False
    """
)


def test_pytest_plugin_records_every_outcome(tmp_path):
    (tmp_path / "test_suite.py").write_text(_SUITE)
    log = tmp_path / "results.jsonl"
    env = {
        **os.environ,
        "PYTEST_RESULT_LOG": str(log),
        "PYTHONPATH": str(AUDIT_DIR),
        "PYTEST_ADDOPTS": "",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "_grader_pytest",
            "-p",
            "no:cacheprovider",
            "-k",
            "not deselectme",
            "test_suite.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stdout
    res = audit.read_result_log(log)
    counts = (res.passed, res.failed, res.errors, res.skipped, res.xfailed, res.xpassed, res.deselected)
    assert counts == (1, 1, 1, 1, 1, 1, 1)
    assert res.exitstatus == 1
    assert res.first_failures[0].startswith("test_suite.py::test_fail (test_suite.py:11): assert 1 == 2")
    assert "fixture exploded" in res.first_failures[1]


def test_result_log_survives_junk(tmp_path):
    log = tmp_path / "results.jsonl"
    log.write_text(
        '{"nodeid": "t::a", "when": "call", "outcome": "passed"}\n'
        'garbage\n{"session": true, "exitstatus": "x"}\n'
    )
    res = audit.read_result_log(log)
    assert (res.passed, res.exitstatus, res.records) == (1, None, 2)
    assert audit.read_result_log(tmp_path / "none.jsonl").records == 0
