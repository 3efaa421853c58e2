"""Attacks on what the grader reads (issue 14): the pristine copy, hardened git, safe opening, archive link
chains and the start-up order. Each builds a real hostile submission (a real git repository, a real zip, a
real FIFO, a real sitecustomize.py) and runs the real grader on it."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import zipfile
from pathlib import Path

import pytest

from grader import gitsafe, safeio
from grader.audit import read_audit_log, read_result_log
from grader.selftest.mutations import fake_openai_key
from tests.adversarial.builders import commit, sample_copy
from tests.helpers.git import GIT_ENV

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user is only dropped as root")


def _grade(target: Path, cache: Path, *, keep: bool = False) -> dict:
    from grader.grading import grade
    from grader.rubric import load_rubric

    return grade(
        str(target), rubric=load_rubric(), timeout=120, cache_root=cache, jobs=1, keep_workspace=keep
    )


def _kept(report: dict) -> Path:
    note = next(n for n in report.get("notes", []) if n.startswith("workspace kept at "))
    return Path(note.removeprefix("workspace kept at "))


def _rows(report: dict) -> dict[str, dict]:
    return {row["id"]: row for row in report["rows"]}


def _append_to_makefile_target(repo: Path, target: str, lines: list[str]) -> None:
    makefile = repo / "Makefile"
    out: list[str] = []
    inside = False
    for line in makefile.read_text(encoding="utf-8").splitlines():
        if inside and not line.startswith("\t"):
            out += [f"\t{extra}" for extra in lines]
            inside = False
        out.append(line)
        if line.startswith(f"{target}:"):
            inside = True
    if inside:
        out += [f"\t{extra}" for extra in lines]
    makefile.write_text("\n".join(out) + "\n", encoding="utf-8")


# --- 1. the pristine copy ---------------------------------------------------------------------------------

SCRUB = '''
"""Erase the evidence after the suite ran: the key, the tapes' Authorization headers, the history."""
import json, os, pathlib, shutil, subprocess

root = pathlib.Path.cwd()
(root / "config" / "local.env").unlink()
for tape in (root / "cassettes").glob("*.json"):
    data = json.loads(tape.read_text())
    data["request"].pop("headers", None)
    tape.write_text(json.dumps(data, indent=2, sort_keys=True) + "\\n")
shutil.rmtree(root / ".git")
git = ["git", "-c", "user.name=x", "-c", "user.email=x@x", "-c", "init.defaultBranch=main"]
for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "clean"]):
    subprocess.run(git + args, check=True)
'''


@pytest.mark.index
@pytest.mark.slow
def test_make_test_erasing_its_evidence_still_gets_the_key_and_header_findings(
    tmp_path: Path, grade_cache: Path
) -> None:
    repo = sample_copy(tmp_path / "cand")
    key = fake_openai_key()
    (repo / "config").mkdir()
    (repo / "config" / "local.env").write_text(f"OPENAI_API_KEY={key}\n", encoding="utf-8")
    tape = sorted((repo / "cassettes").glob("*.json"))[0]
    data = json.loads(tape.read_text(encoding="utf-8"))
    data["request"]["headers"] = {"authorization": f"Bearer {key}"}
    tape.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (repo / "tools" / "scrub.py").write_text(SCRUB, encoding="utf-8")
    _append_to_makefile_target(repo, "test", ["$(PYTHON) tools/scrub.py"])
    commit(repo, "work")

    report = _grade(repo, grade_cache, keep=True)
    kept = _kept(report)
    try:
        # The attack ran: the checkout the suite owned was scrubbed, its history is one clean commit (kept
        # as .git.inert: the kept checkout's .git is the submitted one, grader/kept.py).
        assert not (kept / "repo" / "config" / "local.env").exists()
        suite_git = tmp_path / "suite-git"
        shutil.copytree(kept / "repo" / ".git.inert", suite_git, symlinks=True)
        (suite_git / "HEAD.inert").rename(suite_git / "HEAD")
        log = subprocess.run(
            gitsafe.argv("--git-dir", str(suite_git), "log", "--format=%s"),
            env=gitsafe.env(),
            capture_output=True,
            text=True,
            check=True,
        )
        assert log.stdout.split() == ["clean"]
    finally:
        shutil.rmtree(kept, ignore_errors=True)
    secrets = report["facts"]["secrets"]
    assert secrets["in_tree"] >= 1 and secrets["in_history"] >= 1, secrets
    locations = [f["location"] for f in report["findings"] if f["check"] == "secrets"]
    assert any("config/local.env" in where for where in locations), locations
    assert report["facts"]["hygiene"]["credential_headers"] == 1, report["facts"]["hygiene"]
    assert _rows(report)["no-credentials"]["score"] == 0


@ROOT_ONLY
def test_the_pristine_copy_is_out_of_the_sandbox_users_reach(tmp_path: Path, make_submission) -> None:
    from grader.acquire import acquire

    repo = make_submission({"pkg/__init__.py": "", "pkg/wide.py": "X = 1\n"})
    (repo / "pkg" / "wide.py").chmod(0o666)  # a world-writable file in the submission
    ws = acquire(str(repo), tmp_path / "ws")
    assert ws.pristine is not None and ws.pristine != ws.repo
    st = ws.pristine.stat()
    assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    for dirpath, dirnames, filenames in os.walk(ws.pristine):
        for name in (*dirnames, *filenames):
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert stat.S_ISLNK(mode) or not mode & 0o022, os.path.join(dirpath, name)
    # The sandbox user (nobody) can neither write nor even list it.
    probe = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ls", str(ws.pristine)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode != 0 and "Permission denied" in probe.stderr


# --- 2. git never runs the submission's configuration ------------------------------------------------------


def _hostile_config(config_target: Path, marker: Path) -> Path:
    """A script that leaves ``marker`` when run, named by every program-running git setting."""
    script = marker.parent / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat >/dev/null 2>&1\nexit 0\n", encoding="utf-8")
    script.chmod(0o755)
    env = {**os.environ, **GIT_ENV}
    for key, value in (
        ("gpg.program", str(script)),
        ("log.showSignature", "true"),
        ("core.fsmonitor", str(script)),
        ("diff.external", str(script)),
        ("core.pager", str(script)),
        ("diff.evil.textconv", str(script)),
    ):
        subprocess.run(["git", "-C", str(config_target), "config", key, value], env=env, check=True)
    return script


def _signed_history(repo: Path, tmp_path: Path) -> None:
    # A commit with a gpgsig header: `git log` with log.showSignature runs gpg.program on it.
    env = {**os.environ, **GIT_ENV}
    head = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "commit", "HEAD"], env=env, capture_output=True, check=True
    ).stdout.decode()
    headers, _, message = head.partition("\n\n")
    sig = "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----"
    signed = f"{headers}\n{sig}\n\n{message}"
    sha = (
        subprocess.run(
            ["git", "-C", str(repo), "hash-object", "-t", "commit", "-w", "--stdin"],
            input=signed.encode(),
            env=env,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    subprocess.run(["git", "-C", str(repo), "update-ref", "HEAD", sha], env=env, check=True)


def test_history_scan_never_runs_programs_the_repository_config_names(
    tmp_path: Path, make_submission
) -> None:
    from grader.secrets.history import scan_history_with
    from grader.secrets.scanner import Scanner

    repo = make_submission({"a.txt": "one\n", ".gitattributes": "a.txt diff=evil\n"})
    (repo / "a.txt").write_text("two\n", encoding="utf-8")
    commit(repo, "two")
    _signed_history(repo, tmp_path)
    marker = tmp_path / "RAN"
    _hostile_config(repo, marker)
    # The config is live: a plain `git log` runs the script.
    subprocess.run(["git", "-C", str(repo), "log", "-p"], capture_output=True, check=False)
    assert marker.exists()
    marker.unlink()

    scan_history_with(Scanner(), repo)
    subprocess.run(
        gitsafe.argv("-C", str(repo), "log", "-p", "--no-textconv", "--no-ext-diff"),
        env=gitsafe.env(),
        capture_output=True,
        check=True,
    )
    assert not marker.exists()


@pytest.mark.index
@pytest.mark.slow
def test_git_config_from_the_submission_or_its_suite_never_runs_in_grade(
    tmp_path: Path, make_submission, grade_cache: Path
) -> None:
    marker = tmp_path / "RAN"
    script = tmp_path / "evil.sh"
    repo = make_submission(
        {
            "pkg/__init__.py": "",
            "tests/test_config.py": f"""
                import subprocess


                def test_writes_hostile_git_config():
                    for key, value in (
                        ("gpg.program", "{script}"),
                        ("log.showSignature", "true"),
                        ("core.fsmonitor", "{script}"),
                        ("diff.external", "{script}"),
                    ):
                        subprocess.run(["git", "config", key, value], check=True)
                """,
        }
    )
    _signed_history(repo, tmp_path)
    _hostile_config(repo, marker)  # the submitted repository's own .git/config, too
    assert script.exists()

    report = _grade(repo, grade_cache)

    assert report["facts"]["replay"]["passed"] == 1, report["facts"]["replay"]
    assert report["facts"]["secrets"]["commits_scanned"] >= 1
    assert not marker.exists()


# --- 3. safe opening ---------------------------------------------------------------------------------------


def _with_timeout(func, seconds: float = 60.0):  # generous: a busy machine is slow, not wrong
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["value"] = func()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the read blocked"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


def test_logs_replaced_by_a_fifo_or_a_link_to_dev_zero_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "audit.jsonl"
    os.mkfifo(fifo)
    log = _with_timeout(lambda: read_audit_log(fifo))
    assert log.unsafe and "not a regular file" in log.unsafe
    zero = tmp_path / "results.jsonl"
    zero.symlink_to("/dev/zero")
    res = _with_timeout(lambda: read_result_log(zero))
    assert res.records == 0 and "link" in res.unsafe
    through = tmp_path / "via"
    through.symlink_to(tmp_path)
    (tmp_path / "real.txt").write_text("x", encoding="utf-8")
    with pytest.raises(safeio.UnsafeFile):
        safeio.read_bytes(through / "real.txt", root=tmp_path)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    with pytest.raises(safeio.UnsafeFile):
        safeio.read_bytes(big, cap=10)
    assert safeio.read_bytes(big, cap=10, truncate=True) == b"x" * 10


def test_a_fifo_named_like_a_module_does_not_block_boundary_or_loud_miss(tmp_path: Path) -> None:
    from grader.checks.boundary import _scan
    from grader.checks.loud_miss import scan_fallbacks
    from grader.tamper import scan

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "real.py").write_text("import httpx\nclient = httpx.Client()\n", encoding="utf-8")
    os.mkfifo(tmp_path / "pkg" / "client.py")
    modules, _unparsable = _with_timeout(lambda: _scan(tmp_path))
    assert [m.path for m in modules] == ["pkg/__init__.py", "pkg/real.py"]
    assert _with_timeout(lambda: scan_fallbacks(tmp_path)) == []
    assert _with_timeout(lambda: scan(tmp_path)).files_scanned == 2


FLOOD_TEST = """
import os


def test_replaces_the_audit_log():
    path = os.environ["PY_AUDIT_LOG"]
    os.unlink(path)
    {how}
"""


@pytest.mark.index
@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "how"),
    [("fifo", "os.mkfifo(path)"), ("dev-zero", "os.symlink('/dev/zero', path)")],
)
def test_an_audit_log_replaced_by_the_suite_is_tamper_evidence_not_a_hang(
    name: str, how: str, tmp_path: Path, make_submission, grade_cache: Path
) -> None:
    repo = make_submission(
        {"pkg/__init__.py": "", "tests/test_flood.py": FLOOD_TEST.format(how=how)}, name=f"cand-{name}"
    )
    # A hang never ends: the deadline only has to outlast a slow grade on a busy machine.
    report = _with_timeout(lambda: _grade(repo, grade_cache), 900)
    replay = report["facts"]["replay"]
    assert replay["passed"] == 1 and replay["forged"] is True, replay
    row = _rows(report)["offline-replay"]
    assert row["score"] is not None and row["score"] <= 1, row
    assert "replaced" in row["evidence"], row["evidence"]


# --- 4. archive link chains --------------------------------------------------------------------------------


def _zip_with_links(path: Path, members: list[tuple[str, str, bool]]) -> Path:
    """(name, content or link target, is_link) in order, as a Unix zip."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, is_link in members:
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = ((stat.S_IFLNK | 0o777) if is_link else (stat.S_IFREG | 0o644)) << 16
            zf.writestr(info, data)
    return path


@pytest.mark.parametrize(
    "members",
    [
        # A chain that normalizes inside the archive and resolves outside it, then a member through it.
        [
            ("cand/README.md", "hi\n", False),
            ("cand/vendor/d", ".", True),
            ("cand/vendor/up", "d/d/d/d/../../../../../..", True),
            ("cand/vendor/up/escaped.txt", "written outside\n", False),
        ],
        # A link that stays inside, and a member written through it.
        [
            ("cand/README.md", "hi\n", False),
            ("cand/vendor/d", ".", True),
            ("cand/vendor/d/escaped.txt", "written through a link\n", False),
        ],
    ],
    ids=["chain-out", "through-link"],
)
def test_zip_link_chains_are_refused_with_one_line(
    members: list[tuple[str, str, bool]], tmp_path: Path, grade_cli
) -> None:
    archive = _zip_with_links(tmp_path / "cand.zip", members)
    done = grade_cli([str(archive)], cwd=tmp_path, env={"TMPDIR": str(tmp_path)})
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "link" in lines[0], lines
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not Path("/escaped.txt").exists()


# --- 5. the guard loads first ------------------------------------------------------------------------------

FORGING_SITECUSTOMIZE = '''
"""Rewrite the grader's records on their way out: every failed becomes passed."""
import os

os.environ["PYTEST_RESULT_LOG"] = os.devnull  # and keep the cross-check log quiet
_real_write = os.write


def _write(fd, data):
    if isinstance(data, (bytes, bytearray)):
        data = bytes(data).replace(b'"failed"', b'"passed"').replace(b'"error"', b'"passed"')
    return _real_write(fd, data)


os.write = _write
'''

FOUR_FAILURES = """
import pytest


@pytest.mark.parametrize("n", range(4))
def test_real_failure(n):
    assert n == -1
"""


@pytest.mark.index
@pytest.mark.slow
@pytest.mark.parametrize("makefile_path", [False, True], ids=["plain-makefile", "makefile-puts-root-on-path"])
def test_a_forging_sitecustomize_does_not_turn_failures_into_a_pass(
    makefile_path: bool, tmp_path: Path, grade_cache: Path
) -> None:
    repo = sample_copy(tmp_path / "cand")
    (repo / "sitecustomize.py").write_text(FORGING_SITECUSTOMIZE, encoding="utf-8")
    (repo / "tests" / "test_zz_fail.py").write_text(FOUR_FAILURES, encoding="utf-8")
    if makefile_path:
        # The Makefile puts the repository root on PYTHONPATH in front of the grader's folder.
        text = (repo / "Makefile").read_text(encoding="utf-8")
        text = text.replace(
            "CASSETTE_MODE=replay $(PYTHON) -m pytest",
            'PYTHONPATH=".:$$PYTHONPATH" CASSETTE_MODE=replay $(PYTHON) -m pytest',
            1,
        )
        (repo / "Makefile").write_text(text, encoding="utf-8")
    commit(repo, "work")

    report = _grade(repo, grade_cache)

    replay = report["facts"]["replay"]
    row = _rows(report)["offline-replay"]
    if makefile_path:
        # The sitecustomize ran first and forged the guard's records; the clean interpreter saw through it.
        assert replay["forged"] is True, replay
        assert "clean interpreter" in row["evidence"] or "clean interpreter" in " ".join(row["details"])
    else:
        # It never ran: the repository root is not on the start-up path.
        assert replay["failed"] == 4, replay
    assert row["score"] <= 1, row
    assert report["total"]["points"] < report["total"]["max"]


def test_the_grader_startup_module_keeps_the_tree_off_the_start_up_path(tmp_path: Path) -> None:
    from grader import tamper

    folder = tmp_path / "startup"
    tamper.write_guard(folder)
    tree = tmp_path / "tree"
    (tree / "tools").mkdir(parents=True)
    (tree / "sitecustomize.py").write_text("raise SystemExit('the tree ran first')\n", encoding="utf-8")
    (tree / "json.py").write_text("raise SystemExit('shadowed the standard library')\n", encoding="utf-8")
    (tree / "mine.py").write_text("VALUE = 7\n", encoding="utf-8")
    (tree / "tools" / "helper.py").write_text("HELP = 1\n", encoding="utf-8")
    (tree / "tools" / "run.py").write_text("import helper, json, mine\nprint(helper.HELP, mine.VALUE)\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(folder),
        "PYTHONSAFEPATH": "1",
        "PYTHONNOUSERSITE": "1",
        "PY_SOURCE_PATH": str(tree),
    }
    for argv in (
        [sys.executable, "-c", "import json, mine; print(mine.VALUE)"],
        [sys.executable, "tools/run.py"],
    ):
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        assert "7" in done.stdout


def test_startup_files_are_listed_by_the_tamper_scan(tmp_path: Path) -> None:
    from grader.tamper import scan

    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(FORGING_SITECUSTOMIZE), encoding="utf-8")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "usercustomize.py").write_text("", encoding="utf-8")
    (tmp_path / "pluggy").mkdir()
    (tmp_path / "pluggy" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "lib" / "pluggy.py").write_text("", encoding="utf-8")  # not top-level: never imported first
    # Compiled stand-ins import as source ones do, from the root or src/; a folder without __init__.py is
    # a namespace portion, which the installed package wins over.
    (tmp_path / "pytest_socket.pyc").write_bytes(b"")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "_pytest.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (tmp_path / "src" / "iniconfig.py").write_text("", encoding="utf-8")
    (tmp_path / "packaging").mkdir()
    (tmp_path / "packaging" / "version.py").write_text("", encoding="utf-8")
    result = scan(tmp_path)
    assert sorted(h.location for h in result.startup_hooks) == [
        "lib/usercustomize.py:1",
        "pluggy/__init__.py:1",
        "pytest_socket.pyc:1",
        "sitecustomize.py:1",
        "src/_pytest.cpython-311-x86_64-linux-gnu.so:1",
        "src/iniconfig.py:1",
    ]
    why = {h.location: h.why for h in result.startup_hooks}
    assert why["pytest_socket.pyc:1"].startswith("shadows pytest_socket, ")
    assert not why["sitecustomize.py:1"].startswith("shadows")  # listed once, as the start-up module it is


@pytest.mark.index
@pytest.mark.slow
def test_a_suite_deleting_its_skipped_failure_after_the_run_is_still_caught(
    make_submission, grade_cache: Path
) -> None:
    # The verifying rerun (skip marks stripped) runs in a fresh copy of the pristine tree: deleting the
    # skipped test from the checkout after the first run hides nothing.
    repo = make_submission(
        {
            "pkg/__init__.py": "",
            "tests/test_ok.py": "def test_ok():\n    assert True\n",
            "tests/test_hidden.py": """
                import pytest


                @pytest.mark.skip(reason="flaky")
                def test_hidden():
                    assert 1 == 2
                """,
        }
    )
    (repo / "Makefile").write_text(
        "test:\n\tpython -m pytest; status=$$?; rm -f tests/test_hidden.py; exit $$status\n", encoding="utf-8"
    )
    commit(repo, "makefile")

    report = _grade(repo, grade_cache)

    replay = report["facts"]["replay"]
    assert replay["hidden_failures"] == 1, replay
    assert "tests/test_hidden.py::test_hidden" in _rows(report)["offline-replay"]["evidence"]
