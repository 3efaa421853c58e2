"""Hard limits, each through the real `grade` command.

Hostile or strange submissions are graded (or refused with exit 2 when unsafe), the grader never crashes,
comes back in time, always writes its report, and the report's evidence names what happened.
Infrastructure failures make rows not-assessable, never 0.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.adversarial.builders import commit

pytestmark = [pytest.mark.slow, pytest.mark.index]

TIMEOUT = 12


# The grader may run the suite and a few probes; each is bounded by --timeout. "Back in time" here is: the
# replay step within the timeout + 5 s, and the whole grade (install excluded) within a few timeouts.
@pytest.fixture(scope="module")
def world_cache() -> Iterator[Path]:
    """A venv cache the sandbox user can reach (a /tmp/pytest-of-root cache would keep the grader as root)."""
    root = Path(tempfile.mkdtemp(prefix="kit-hard-limits-", dir="/var/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _repo(tmp_path: Path, files: dict[str, str | bytes], name: str = "sub") -> Path:
    repo = tmp_path / name
    repo.mkdir()
    files = {"pyproject.toml": f'[project]\nname = "{name}"\nversion = "0.1.0"\ndependencies = []\n', **files}
    for rel, content in files.items():
        path = repo / os.fsdecode(rel.encode("utf-8", "surrogateescape"))
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return commit(repo)


GradeRun = Callable[..., tuple[subprocess.CompletedProcess[str], dict | None, float]]


@pytest.fixture
def grade_run(grade_cli, world_cache: Path, tmp_path: Path) -> GradeRun:
    def run(target: Path | str, *extra: str, env: dict[str, str] | None = None, cache: Path | None = None):
        out = tmp_path / "report.json"
        out.unlink(missing_ok=True)
        started = time.monotonic()
        done = grade_cli(
            [
                "--cache-dir",
                str(cache or world_cache),
                "--format",
                "json",
                "-q",
                "--timeout",
                str(TIMEOUT),
                "-o",
                str(out),
                *extra,
                str(target),
            ],
            cwd=tmp_path,
            env=env,
            timeout=600,
        )
        elapsed = time.monotonic() - started
        assert "Traceback" not in done.stderr, done.stderr
        report = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
        # No wall-clock bound here (a busy machine is slow, not wrong): a grade that hangs fails on
        # grade_cli's own timeout; each test asserts what the grader recorded (timed_out, its notes).
        return done, report, elapsed

    return run


def _replay(report: dict) -> tuple[dict, dict]:
    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    return row, report["facts"]["replay"]


def _graded(done: subprocess.CompletedProcess[str], report: dict | None) -> dict:
    assert done.returncode == 0, done.stderr
    assert report is not None
    return report


# --- runaway test code ----------------------------------------------------------------------------


def test_hanging_test_with_an_escaped_daemon(tmp_path: Path, grade_run: GradeRun) -> None:
    repo = _repo(
        tmp_path,
        {
            "tests/test_hang.py": (
                "import os, signal, subprocess, time\n\n\n"
                "def test_ok():\n    pass\n\n\n"
                "def test_hang():\n"
                "    subprocess.Popen(['sleep', '3600'], start_new_session=True)\n"
                "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "    time.sleep(3600)\n"
            )
        },
    )
    report = _graded(*grade_run(repo)[:2])
    row, facts = _replay(report)
    assert facts["timed_out"] is True and row["score"] == 0
    assert f"timed out after {TIMEOUT} s" in row["evidence"]


def test_fork_bomb_is_contained(tmp_path: Path, grade_run: GradeRun) -> None:
    # Bounded (at most 2,000 sleepers) so a machine without the process limit survives the test too.
    repo = _repo(
        tmp_path,
        {
            "tests/test_bomb.py": (
                "import os, time\n\n\n"
                "def test_bomb():\n"
                "    children = 0\n"
                "    for _ in range(2000):\n"
                "        pid = os.fork()\n"
                "        if pid == 0:\n"
                "            time.sleep(60)\n"
                "            os._exit(0)\n"
                "        children += 1\n"
                "    assert children < 2000\n"
            )
        },
    )
    report = _graded(*grade_run(repo)[:2])
    row, facts = _replay(report)
    assert row["score"] == 0, row
    if report["isolation"].get("user") == "unprivileged":
        # RLIMIT_NPROC applies: fork fails long before 2,000 children.
        assert facts["failed"] + facts["errors"] >= 1 or facts["timed_out"] or facts["exit_abnormal"], facts
        assert "BlockingIOError" in json.dumps(row["details"]) or facts["timed_out"] or facts["exit_abnormal"]


@pytest.mark.parametrize(
    "stop",
    ["pytest.exit('done', returncode=0)", "raise KeyboardInterrupt"],
    ids=["pytest-exit-0", "keyboard-interrupt"],
)
def test_a_green_session_ended_before_its_failing_tests_ran_is_abnormal(
    tmp_path: Path, grade_run: GradeRun, stop: str
) -> None:
    """Red team 12: a test calling ``pytest.exit(returncode=0)`` ended the session before the failing tests
    collected after it, and the run read as all green (offline-replay 3)."""
    repo = _repo(
        tmp_path,
        {
            "tests/test_a.py": "def test_ok():\n    pass\n",
            "tests/test_m.py": f"import pytest\n\n\ndef test_done():\n    {stop}\n",
            "tests/test_z.py": "def test_fails():\n    assert False, 'real failure'\n",
        },
    )
    report = _graded(*grade_run(repo)[:2])
    row, facts = _replay(report)
    assert facts["failed"] == 0 and facts["exit_abnormal"] is True, facts
    assert row["score"] <= 1 and "collected tests ran" in row["evidence"], row


def test_memory_hog_is_stopped_by_the_address_space_limit(tmp_path: Path, grade_run: GradeRun) -> None:
    repo = _repo(
        tmp_path,
        {"tests/test_hog.py": "def test_ok():\n    pass\n\n\ndef test_hog():\n    b = bytearray(16 << 30)\n"},
    )
    report = _graded(*grade_run(repo)[:2])
    row, facts = _replay(report)
    assert facts["passed"] == 1 and facts["failed"] == 1, facts
    assert "MemoryError" in json.dumps(row["details"]), row["details"]


def test_gigabytes_of_output_are_capped(tmp_path: Path, grade_run: GradeRun) -> None:
    repo = _repo(
        tmp_path,
        {
            "tests/test_loud.py": (
                "import os\n\n\n"
                "def test_loud():\n"
                "    chunk = b'x' * (1 << 20)\n"
                "    for _ in range(2048):\n"  # 2 GiB straight to the real stdout, past pytest's capture
                "        os.write(1, chunk)\n"
            )
        },
    )
    done, report, _ = grade_run(repo)
    report = _graded(done, report)
    row, facts = _replay(report)
    # pytest's fd capture sends the bytes to a temp file: the 512 MiB file-size limit stops the test there
    # ("File too large"); without capture the grader's pipe drain caps them. Either way: graded, bounded.
    details = json.dumps(row["details"])
    assert facts["passed"] == 1 or facts["timed_out"] or "File too large" in details, (facts, details)
    assert len(json.dumps(report)) < 5_000_000


def test_writes_outside_the_workspace_are_refused(
    tmp_path: Path, grade_run: GradeRun, world_cache: Path
) -> None:
    # A file the grader owns in a world-traversable folder, the cached venv's files, and a file beside HOME.
    sentinel_dir = Path(tempfile.mkdtemp(prefix="kit-sentinel-", dir="/var/tmp"))
    sentinel_dir.chmod(0o755)
    sentinel = sentinel_dir / "grader-file.txt"
    sentinel.write_text("untouched\n", encoding="utf-8")
    try:
        repo = _repo(
            tmp_path,
            {
                "tests/test_escape.py": (
                    "import glob, os, sys\n\n\n"
                    f"SENTINEL = {str(sentinel)!r}\n\n\n"
                    "def _try(path):\n"
                    "    try:\n"
                    "        with open(path, 'a') as f:\n"
                    "            f.write('pwned')\n"
                    "        return path\n"
                    "    except OSError:\n"
                    "        return None\n\n\n"
                    "def test_escape():\n"
                    "    targets = [SENTINEL, os.path.join(os.environ['HOME'], '..', 'escape.txt')]\n"
                    "    site = os.path.join(sys.prefix, 'lib', 'python*', 'site-packages')\n"
                    "    targets += glob.glob(os.path.join(site, '_grader_*.py'))\n"
                    "    written = [p for p in map(_try, targets) if p]\n"
                    "    assert not written, written\n"
                )
            },
        )
        report = _graded(*grade_run(repo)[:2])
        row, facts = _replay(report)
        iso = report["isolation"]
        if iso.get("user") != "unprivileged" and iso.get("filesystem") != "bwrap":
            pytest.skip("neither a privilege drop nor bwrap here: writes are not refused (docs/security.md)")
        assert facts["passed"] == 1 and facts["failed"] == 0, row
        assert sentinel.read_text(encoding="utf-8") == "untouched\n"
        for plugin in world_cache.glob("*/lib/python*/site-packages/_grader_*.py"):
            assert b"pwned" not in plugin.read_bytes(), plugin
    finally:
        shutil.rmtree(sentinel_dir, ignore_errors=True)


# --- hostile repositories -------------------------------------------------------------------------


def test_symlink_tapes_are_never_followed(tmp_path: Path, grade_run: GradeRun) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('{"secret": "sk-outside-the-repo-0123456789abcdef"}', encoding="utf-8")
    repo = _repo(tmp_path, {"tests/test_ok.py": "def test_ok():\n    pass\n", "cassettes/ok.json": "{}\n"})
    (repo / "cassettes" / "passwd.json").symlink_to("/etc/passwd")
    (repo / "cassettes" / "outside.json").symlink_to(outside)
    commit(repo, "links")
    report = _graded(*grade_run(repo)[:2])
    text = json.dumps(report)
    assert "root:x:0:0" not in text and "sk-outside-the-repo" not in text
    hygiene = next(r for r in report["rows"] if r["id"] == "cassette-hygiene")
    assert hygiene["score"] is None or hygiene["score"] <= 1, hygiene
    assert "symlink" in text


@pytest.mark.parametrize("member", ["../../evil.txt", "/tmp/kit-abs-evil.txt"])
def test_zip_slip_and_absolute_archives_are_refused(tmp_path: Path, grade_run: GradeRun, member: str) -> None:
    archive = tmp_path / "sub.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("sub/pyproject.toml", '[project]\nname = "x"\nversion = "0"\n')
        zf.writestr(member, "pwned")
    done, report, _ = grade_run(archive)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("grade: error: archive sub.zip") and ("escapes" in line or "absolute" in line), (
        line
    )
    assert report is None
    assert not Path("/tmp/kit-abs-evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()


def test_git_config_and_hooks_never_run_at_clone(tmp_path: Path, grade_run: GradeRun) -> None:
    marker = tmp_path / "hook-ran"
    repo = _repo(tmp_path, {"tests/test_ok.py": "def test_ok():\n    pass\n"})
    script = f"#!/bin/sh\ntouch {marker}\n"
    for hook in ("post-checkout", "post-merge", "pre-commit", "fsmonitor-watchman"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(script, encoding="utf-8")
        path.chmod(0o755)
    evil = tmp_path / "evil.sh"
    evil.write_text(script, encoding="utf-8")
    evil.chmod(0o755)
    for key, value in (
        ("core.fsmonitor", str(evil)),
        ("core.sshCommand", str(evil)),
        ("core.pager", str(evil)),
    ):
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    report = _graded(*grade_run(repo)[:2])
    assert not marker.exists()
    assert _replay(report)[1]["passed"] == 1


def test_submodule_pointing_at_a_file_url_is_not_fetched(tmp_path: Path, grade_run: GradeRun) -> None:
    private = _repo(tmp_path, {"secret.txt": "private-grader-data-7f3a\n"}, name="private")
    repo = _repo(tmp_path, {"tests/test_ok.py": "def test_ok():\n    pass\n"})
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ALLOW_PROTOCOL": "file"}
    subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "submodule", "add", f"file://{private}", "vendor"],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
    commit(repo, "submodule")
    report = _graded(*grade_run(repo, "--keep-workspace")[:2])
    kept = next(n for n in report.get("notes", []) if n.startswith("workspace kept at "))
    workspace = Path(kept.removeprefix("workspace kept at "))
    try:
        assert not (workspace / "repo" / "vendor" / "secret.txt").exists()
        assert "private-grader-data" not in json.dumps(report)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def test_non_utf8_names_and_contents(tmp_path: Path, grade_run: GradeRun) -> None:
    repo = _repo(
        tmp_path,
        {
            "tests/test_ok.py": "def test_ok():\n    pass\n",
            "data/caf\udce9.txt": b"caf\xe9 \xff\xfe latin-1\n",
            "cassettes/t\udcff.json": b'{"version": 1, "key": "\xff\xfe"}\n',
            "README.md": b"\xff\xfe\x00b\x00a\x00d\x00\n",
        },
    )
    report = _graded(*grade_run(repo)[:2])
    assert _replay(report)[1]["passed"] == 1
    assert any("invalid" in r["evidence"] or r["score"] is not None for r in report["rows"])


def test_a_100_mb_tape(tmp_path: Path, grade_run: GradeRun) -> None:
    repo = _repo(tmp_path, {"tests/test_ok.py": "def test_ok():\n    pass\n"})
    body = '{"version": 1, "key": "big", "response": {"body": {"text": "' + "a" * (100 * 1024**2) + '"}}}\n'
    (repo / "cassettes").mkdir()
    (repo / "cassettes" / "big.json").write_text(body, encoding="utf-8")
    del body
    commit(repo, "big tape")
    report = _graded(*grade_run(repo)[:2])
    hygiene = next(r for r in report["rows"] if r["id"] == "cassette-hygiene")
    assert hygiene["score"] is not None and hygiene["score"] <= 1, hygiene
    assert "MB" in hygiene["evidence"], hygiene


def test_ten_thousand_tapes(tmp_path: Path, grade_run: GradeRun) -> None:
    repo = _repo(tmp_path, {"tests/test_ok.py": "def test_ok():\n    pass\n"})
    folder = repo / "cassettes"
    folder.mkdir()
    for i in range(10_000):
        (folder / f"{i:05d}.json").write_text(f'{{"version": 1, "key": "{i:05d}"}}\n', encoding="utf-8")
    commit(repo, "many tapes")
    report = _graded(*grade_run(repo)[:2])
    hygiene = next(r for r in report["rows"] if r["id"] == "cassette-hygiene")
    assert "10000 tapes" in hygiene["evidence"] or "10,000" in hygiene["evidence"], hygiene


def test_invalid_json_and_yaml_tapes(tmp_path: Path, grade_run: GradeRun) -> None:
    repo = _repo(
        tmp_path,
        {
            "tests/test_ok.py": "def test_ok():\n    pass\n",
            "cassettes/broken.json": '{"version": 1, "key": ',
            "cassettes/broken.yaml": "interactions: [\n  - {request: \n",
            "cassettes/alias-bomb.yaml": "a: &a [x, x]\nb: &b [*a, *a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n",
        },
    )
    report = _graded(*grade_run(repo)[:2])
    hygiene = next(r for r in report["rows"] if r["id"] == "cassette-hygiene")
    assert hygiene["score"] is not None and hygiene["score"] <= 1, hygiene
    assert "invalid" in hygiene["evidence"], hygiene


# Red team 11: a valid TOML integer of 5,000 digits (int() refuses past 4,300 with a plain ValueError, which
# crashed the grade before any check: every row out of the total), and a 1.5 KB vcrpy cassette whose bodies
# alias a chain of anchors: 10^9 values once expanded, minutes of the grader's own time.
_BOMB = "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "x"] * 10) + "]\n" for i in range(9)) + (
    "interactions:\n- request: {method: POST, uri: 'https://api.openai.com/v1/chat/completions', body: *a8}\n"
    "  response: {status: {code: 200}, body: {string: *a8}}\n"
)


def test_a_huge_integer_in_pyproject_and_an_alias_bomb_are_graded(
    tmp_path: Path, grade_run: GradeRun
) -> None:
    pyproject = '[project]\nname = "sub"\nversion = "0.1.0"\ndependencies = []\n\n[tool.bignum]\nseed = '
    repo = _repo(
        tmp_path,
        {
            "pyproject.toml": pyproject + "7" * 5000 + "\n",
            "tests/test_ok.py": "def test_ok():\n    pass\n",
            "cassettes/session.yaml": _BOMB,
        },
    )
    report = _graded(*grade_run(repo)[:2])
    rows = {r["id"]: r for r in report["rows"]}
    assert rows["offline-replay"]["status"] == "scored", rows["offline-replay"]
    assert rows["cassette-hygiene"]["score"] is not None and "invalid" in rows["cassette-hygiene"]["evidence"]
    assert any("pyproject.toml is not valid TOML" in note for note in report["notes"]), report["notes"]


# --- infrastructure vs submission -----------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_index_makes_rows_not_assessable(tmp_path: Path, grade_run: GradeRun) -> None:
    repo = _repo(tmp_path, {"tests/test_ok.py": "def test_ok():\n    pass\n"})
    dead = f"http://127.0.0.1:{_closed_port()}/simple"
    fresh = tmp_path / "fresh-cache"  # nothing cached: the install must reach the index
    env = {"UV_INDEX_URL": dead, "UV_DEFAULT_INDEX": dead, "PIP_INDEX_URL": dead}
    done, report, _ = grade_run(repo, env=env, cache=fresh)
    report = _graded(done, report)
    row, _facts = _replay(report)
    assert row["status"] == "not-assessable" and row["score"] is None, row
    assert "unreachable" in row["evidence"] or "infrastructure" in row["evidence"], row["evidence"]
    assert all(r["score"] != 0 for r in report["rows"] if r["status"] == "not-assessable")
