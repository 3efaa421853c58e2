"""acquire(): every target kind, against real git repos, a real git daemon and real archives."""

from __future__ import annotations

import io
import os
import socket
import stat
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from grader.acquire import acquire, redact
from grader.errors import BadInput
from tests.helpers.processes import end_group, wait_for

IDENTITY = {
    "GIT_AUTHOR_NAME": "cand",
    "GIT_AUTHOR_EMAIL": "c@example.com",
    "GIT_COMMITTER_NAME": "cand",
    "GIT_COMMITTER_EMAIL": "c@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def git(*args, cwd):
    env = {**os.environ, **IDENTITY}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def source_repo(tmp_path) -> Path:
    repo = tmp_path / "candidate"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "app.py").write_text("print('v1')\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "v1", cwd=repo)
    git("tag", "v1", cwd=repo)
    (repo / "app.py").write_text("print('v2')\n")
    git("commit", "-q", "-am", "v2", cwd=repo)
    git("checkout", "-q", "-b", "feature", cwd=repo)
    (repo / "feature.txt").write_text("f\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "feature", cwd=repo)
    git("checkout", "-q", "main", cwd=repo)
    return repo


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def git_daemon(tmp_path, source_repo):
    base = tmp_path / "served"
    base.mkdir()
    git("clone", "-q", "--bare", str(source_repo), str(base / "cand.git"), cwd=tmp_path)
    port = _free_port()
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--export-all",
            f"--base-path={base}",
            "--listen=127.0.0.1",
            f"--port={port}",
            "--reuseaddr",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # `git daemon` is a wrapper that execs git-daemon children: end the whole group, not the wrapper.
        start_new_session=True,
    )
    deadline = time.monotonic() + 60  # generous: a busy machine is slow, not wrong
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield f"git://127.0.0.1:{port}"
    # Nothing of the group may outlive the fixture (three orphaned daemons were found after full runs).
    end_group(proc)
    assert wait_for(lambda: not _group_alive(proc.pid)), "the git daemon's process group outlived its fixture"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_git_url_from_a_real_daemon_with_full_history(git_daemon, source_repo, tmp_path):
    ws = acquire(f"{git_daemon}/cand.git", tmp_path / "ws")
    assert ws.repo == tmp_path / "ws" / "repo"
    assert ws.commit == git("rev-parse", "main", cwd=source_repo).strip()
    assert git("rev-list", "--count", "HEAD", cwd=ws.repo).strip() == "2"
    branches = git("branch", "-r", cwd=ws.repo)
    assert "origin/feature" in branches
    assert "v1" in git("tag", cwd=ws.repo)


def test_git_url_ref_is_checked_out(git_daemon, source_repo, tmp_path):
    ws = acquire(f"{git_daemon}/cand.git#feature", tmp_path / "ws")
    assert ws.commit == git("rev-parse", "feature", cwd=source_repo).strip()
    assert (ws.repo / "feature.txt").exists()
    ws_tag = acquire(f"{git_daemon}/cand.git#v1", tmp_path / "ws2")
    assert (ws_tag.repo / "app.py").read_text() == "print('v1')\n"


def test_file_url(source_repo, tmp_path):
    ws = acquire(f"file://{source_repo}", tmp_path / "ws")
    assert ws.commit == git("rev-parse", "HEAD", cwd=source_repo).strip()


def test_unreachable_url_is_bad_input(tmp_path):
    port = _free_port()
    with pytest.raises(
        BadInput, match=r"^cannot clone git://127\.0\.0\.1:\d+/nope\.git: .*\(git exit \d+\)$"
    ):
        acquire(f"git://127.0.0.1:{port}/nope.git", tmp_path / "ws")


def test_missing_repository_on_daemon(git_daemon, tmp_path):
    with pytest.raises(BadInput, match="cannot clone"):
        acquire(f"{git_daemon}/absent.git", tmp_path / "ws")


def test_unknown_ref_is_bad_input(source_repo, tmp_path):
    with pytest.raises(BadInput, match="no branch, tag or commit named 'nope'"):
        acquire(f"{source_repo}#nope", tmp_path / "ws")


def test_credentials_are_redacted_in_source_and_errors(tmp_path):
    assert redact("https://bob:s3cret@host.invalid/r.git") == "https://***@host.invalid/r.git"
    port = _free_port()
    with pytest.raises(BadInput) as caught:
        acquire(f"http://bob:s3cret@127.0.0.1:{port}/r.git", tmp_path / "ws")
    assert "s3cret" not in str(caught.value)


def _tree_state(path: Path) -> list[tuple[str, int, int, bytes]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            data = p.read_bytes() if stat.S_ISREG(st.st_mode) else b""
            out.append((str(p.relative_to(path)), st.st_mode, st.st_mtime_ns, data))
    return out


def test_local_repo_is_cloned_untouched_and_its_hooks_do_not_run(source_repo, tmp_path):
    marker = tmp_path / "hook-ran"
    hook = source_repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    before = _tree_state(source_repo)
    ws = acquire(str(source_repo), tmp_path / "ws")
    assert not marker.exists()
    assert _tree_state(source_repo) == before
    assert (ws.repo / "app.py").read_text() == "print('v2')\n"
    assert not (ws.repo / ".git" / "hooks" / "post-checkout").exists()
    # Files are copies, not hardlinks: the sandbox may chown the checkout without touching the user's repo.
    assert all(p.stat().st_nlink == 1 for p in (ws.repo / ".git" / "objects").rglob("*") if p.is_file())


def test_plain_directory_is_copied_and_snapshotted(tmp_path):
    folder = tmp_path / "folder"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "a.py").write_text("x = 1\n")
    (folder / "link").symlink_to("/etc/passwd")
    (folder / ".venv").mkdir()
    (folder / ".venv" / "big").write_text("junk")
    os.mkfifo(folder / "pipe")
    before = _tree_state(folder)
    ws = acquire(str(folder), tmp_path / "ws")
    assert _tree_state(folder) == before
    assert not (folder / ".git").exists()
    assert (ws.repo / "pkg" / "a.py").read_text() == "x = 1\n"
    assert (ws.repo / "link").is_symlink() and os.readlink(ws.repo / "link") == "/etc/passwd"
    assert not (ws.repo / ".venv").exists() and not (ws.repo / "pipe").exists()
    assert git("log", "--format=%an <%ae>", cwd=ws.repo).strip() == "cassette grader <grader@localhost>"
    # A plain folder has no commit of its own: the report says none, not the grader's snapshot.
    assert ws.commit is None
    # Same content, same snapshot commit: the checkout is deterministic.
    again = acquire(str(folder), tmp_path / "ws2")
    assert git("rev-parse", "HEAD", cwd=again.repo) == git("rev-parse", "HEAD", cwd=ws.repo)


def test_a_snapshot_history_is_whole_in_every_copy(tmp_path):
    # The snapshot's objects are packed (a grade copies the checkout once per probe): the history a scan
    # reads from the pristine copy is still complete and the file content exact.
    folder = tmp_path / "folder"
    (folder / "pkg").mkdir(parents=True)
    for n in range(30):
        (folder / "pkg" / f"m{n}.py").write_text(f"x = {n}\n")
    ws = acquire(str(folder), tmp_path / "ws")
    for repo in (ws.repo, ws.pristine):
        assert (
            subprocess.run(["git", "fsck", "--full", "--strict"], cwd=repo, capture_output=True).returncode
            == 0
        )
        assert git("show", "HEAD:pkg/m29.py", cwd=repo) == "x = 29\n"
        assert git("count-objects", "-v", cwd=repo).splitlines()[0] == "count: 0"  # nothing left loose
        assert not (repo / ".git" / "hooks").exists()  # no sample hooks copied into every probe's copy


def test_missing_path(tmp_path):
    with pytest.raises(BadInput, match=r"^no such file or directory: nope-dir$"):
        acquire("nope-dir", tmp_path / "ws")


def _zip(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


def test_zip_with_single_top_folder_is_unwrapped(tmp_path):
    archive = _zip(tmp_path / "sub.zip", {"sub-main/app.py": b"print(1)\n", "sub-main/tests/t.py": b""})
    ws = acquire(str(archive), tmp_path / "ws")
    assert (ws.repo / "app.py").read_text() == "print(1)\n"
    assert (ws.repo / "tests" / "t.py").exists()
    assert ws.commit is None  # an archive without .git: no commit of the candidate's
    assert len(git("rev-parse", "HEAD", cwd=ws.repo).strip()) == 40


def test_zip_slip_is_rejected(tmp_path):
    archive = _zip(tmp_path / "evil.zip", {"ok.txt": b"", "../x": b"pwned"})
    with pytest.raises(BadInput, match=r"^archive evil\.zip: member \.\./x escapes the target$"):
        acquire(str(archive), tmp_path / "ws")
    assert not (tmp_path / "x").exists()


def test_absolute_member_is_rejected(tmp_path):
    archive = _zip(tmp_path / "abs.zip", {"/tmp/abs-evil": b""})
    with pytest.raises(BadInput, match="absolute path"):
        acquire(str(archive), tmp_path / "ws")


def test_zip_symlink_out_of_the_archive_is_rejected(tmp_path):
    archive = _zip(tmp_path / "link.zip", {"a.txt": b""}, links={"escape": "../../etc"})
    with pytest.raises(BadInput, match="points outside"):
        acquire(str(archive), tmp_path / "ws")


def _tar(path: Path, build) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        build(tf)
    return path


def _add(tf: tarfile.TarFile, name: str, data: bytes = b"", **kw) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in kw.items():
        setattr(info, k, v)
    tf.addfile(info, io.BytesIO(data) if data else None)


def test_tar_gz_archive(tmp_path):
    archive = _tar(tmp_path / "sub.tar.gz", lambda tf: (_add(tf, "a.py", b"x\n"), _add(tf, "b/c.py", b"y\n")))
    ws = acquire(str(archive), tmp_path / "ws")
    assert (ws.repo / "a.py").read_text() == "x\n" and (ws.repo / "b" / "c.py").read_text() == "y\n"


def test_tar_device_and_escaping_link_are_rejected(tmp_path):
    dev = _tar(
        tmp_path / "dev.tgz", lambda tf: _add(tf, "null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
    )
    with pytest.raises(BadInput, match="device or special file"):
        acquire(str(dev), tmp_path / "ws")
    link = _tar(tmp_path / "lnk.tgz", lambda tf: _add(tf, "x", type=tarfile.SYMTYPE, linkname="/etc/shadow"))
    with pytest.raises(BadInput, match="points outside"):
        acquire(str(link), tmp_path / "ws2")
    slip = _tar(tmp_path / "slip.tgz", lambda tf: _add(tf, "a/../../x", b"p"))
    with pytest.raises(BadInput, match="escapes the target"):
        acquire(str(slip), tmp_path / "ws3")


def test_archive_file_count_cap(tmp_path, monkeypatch):
    import grader.acquire as acq

    monkeypatch.setattr(acq, "MAX_FILES", 5)
    archive = _zip(tmp_path / "many.zip", {f"f{i}.txt": b"" for i in range(10)})
    with pytest.raises(BadInput, match="more than 5 files"):
        acquire(str(archive), tmp_path / "ws")


def test_archive_containing_a_repo_keeps_its_history(source_repo, tmp_path):
    archive = tmp_path / "repo.tgz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(source_repo, arcname="candidate")
    ws = acquire(str(archive), tmp_path / "ws")
    assert ws.commit == git("rev-parse", "HEAD", cwd=source_repo).strip()
    assert git("rev-list", "--count", "HEAD", cwd=ws.repo).strip() == "2"


def test_an_archives_own_git_folder_is_read_for_keys_a_clone_does_not_carry(source_repo, tmp_path):
    """Red team 13, F2b: a zip of the project folder ships its whole `.git`: a token in a remote URL, the
    reflog of a commit since reset away, the object it added. The clone the grader grades holds none of
    them; the shipped folder is kept (grader-owned) and read as bytes, git never run on it."""
    from grader.secrets import Scanner, scan_history
    from grader.secrets.gitdir import scan_git_dir
    from grader.secrets.samples import expand

    token, message_key, file_key = (expand("hf_{{alpha:34}}", f"gitdir:{n}") for n in range(3))
    git("remote", "add", "origin", f"https://oauth:{token}@example.com/cand.git", cwd=source_repo)
    (source_repo / "debug.env").write_text(f"HF_TOKEN={file_key}\n")
    git("add", "debug.env", cwd=source_repo)
    git("commit", "-q", "-m", f"wip HF_TOKEN={message_key}", cwd=source_repo)
    git("reset", "-q", "--hard", "HEAD~1", cwd=source_repo)
    archive = tmp_path / "cand.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source_repo.rglob("*")):
            zf.write(path, f"candidate/{path.relative_to(source_repo)}")

    ws = acquire(str(archive), tmp_path / "ws")
    assert ws.shipped_git is not None and (ws.shipped_git / "config").is_file()
    assert scan_history(ws.repo) == []  # what a clone holds: none of the three
    found = scan_git_dir(Scanner(), ws.shipped_git, known=set())
    places = {f.location.rsplit(":", 1)[0] for f in found}
    assert len(found) == 3, places
    assert ".git/config" in places
    assert any(p.startswith(".git/objects/") for p in places)  # the reset-away commit's added blob
    assert not any(key in repr(found) for key in (token, message_key, file_key))
    # A plain folder's `.git` is the reviewer's own clone: never read this way.
    assert acquire(str(source_repo), tmp_path / "ws2").shipped_git is None


# --- a `.git` the submission ships: never followed (red-team F12/F13) ---------------------------------------


def _git_repo(path: Path) -> str:
    path.mkdir(parents=True)
    (path / "f.txt").write_text("victim\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "v", "GIT_AUTHOR_EMAIL": "v@x", "GIT_COMMITTER_NAME": "v",
           "GIT_COMMITTER_EMAIL": "v@x", "HOME": str(path.parent)}  # fmt: skip
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "base"]):
        subprocess.run(argv, cwd=path, env=env, check=True, capture_output=True)
    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout


def _zip_text(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def test_an_archived_gitdir_file_never_commits_into_the_repository_it_names(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    head = _git_repo(victim)
    archive = _zip_text(tmp_path / "sub.zip", {".git": f"gitdir: {victim}/.git\n", "agent.py": "x = 1\n"})

    ws = acquire(str(archive), tmp_path / "ws")

    assert ws.commit is None and (ws.repo / "agent.py").is_file() and (ws.repo / ".git").is_dir()
    after = subprocess.run(["git", "-C", str(victim), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert after.stdout == head  # nothing was committed into the repository the archive named


def test_an_archived_git_config_with_a_filter_driver_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    archive = _zip_text(
        tmp_path / "sub.zip",
        {
            ".git": "gitdir: dotgit\n",
            "dotgit/HEAD": "ref: refs/heads/main\n",
            "dotgit/config": (
                "[core]\n\trepositoryformatversion = 0\n"
                f"[filter \"x\"]\n\tclean = sh -c 'touch {marker}; cat'\n"
            ),
            "dotgit/objects/.keep": "",
            "dotgit/refs/heads/.keep": "",
            "nested/.git": f"gitdir: {tmp_path}\n",
            ".gitattributes": "*.md filter=x\n",
            "README.md": "hello\n",
        },
    )  # fmt: skip

    ws = acquire(str(archive), tmp_path / "ws")

    assert not marker.exists()
    assert (ws.repo / "README.md").read_text() == "hello\n" and not (ws.repo / "nested" / ".git").exists()


def test_a_folder_whose_git_is_a_file_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    _git_repo(victim)
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / ".git").write_text("gitdir: ../victim/.git\n")
    (folder / "agent.py").write_text("x = 1\n")
    with pytest.raises(BadInput, match=r"\.git is not a folder"):
        acquire(str(folder), tmp_path / "ws")


def _tree_bomb(repo: Path, levels: int) -> str:
    """A commit whose tree names 10**levels files while git stores one blob and ``levels`` trees."""
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        cwd=repo,
        input="x\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    entry, mode, kind = blob, "100644", "blob"
    for _ in range(levels):
        listing = "".join(f"{mode} {kind} {entry}\tn{i}\n" for i in range(10))
        entry = subprocess.run(
            ["git", "mktree"], cwd=repo, input=listing, capture_output=True, text=True, check=True
        ).stdout.strip()
        mode, kind = "040000", "tree"
    root = subprocess.run(
        ["git", "mktree"], cwd=repo, input=f"040000 tree {entry}\tvendor\n", capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    head = git("rev-parse", "HEAD", cwd=repo).strip()
    commit = git("commit-tree", root, "-p", head, "-m", "vendor", cwd=repo).strip()
    git("update-ref", "refs/heads/main", commit, cwd=repo)
    return commit


def test_a_tree_bomb_is_refused_before_anything_is_checked_out(source_repo, tmp_path):
    # Red team 4, F2: 100,000 files named by a few kilobytes of trees; each copy of the checkout took minutes.
    _tree_bomb(source_repo, levels=5)
    with pytest.raises(BadInput, match="the commit holds more than 20000 files") as refused:
        acquire(str(source_repo), tmp_path / "ws")
    assert "\n" not in str(refused.value)
    written = [p for p in (tmp_path / "ws" / "repo").rglob("*") if ".git" not in p.parts]
    assert written == []


def test_a_tree_bomb_on_the_ref_asked_for_is_refused_too(source_repo, tmp_path):
    bomb = _tree_bomb(source_repo, levels=5)
    git("branch", "bomb", bomb, cwd=source_repo)
    git("reset", "-q", "--hard", "HEAD~1", cwd=source_repo)
    with pytest.raises(BadInput, match="more than 20000 files"):
        acquire(f"{source_repo}#bomb", tmp_path / "ws")
    ws = acquire(str(source_repo), tmp_path / "ws2")  # its main, without the bomb, is graded as usual
    assert (ws.repo / "app.py").is_file()


@pytest.mark.parametrize("form", ["folder", "file-url"])
def test_notes_the_stash_and_other_refs_come_with_the_submission(source_repo, tmp_path, form):
    """Red team 13, F2: a clone brings branches and tags only; a key in a git note, a stash or a ref of
    another namespace was in the submitted repository and never scanned."""
    from grader.secrets import scan_history
    from grader.secrets.samples import expand

    keys = [expand("hf_{{alpha:34}}", f"acquire:{n}") for n in range(3)]
    git("notes", "add", "-m", f"debug HF_TOKEN={keys[0]}", "HEAD", cwd=source_repo)
    (source_repo / "stash.env").write_text(f"HF_TOKEN={keys[1]}\n")
    git("add", "stash.env", cwd=source_repo)
    git("stash", "-q", cwd=source_repo)
    (source_repo / "debug.env").write_text(f"HF_TOKEN={keys[2]}\n")
    git("add", "debug.env", cwd=source_repo)
    git("commit", "-q", "-m", "wip", cwd=source_repo)
    git("update-ref", "refs/backup/wip", "HEAD", cwd=source_repo)
    git("reset", "-q", "--hard", "HEAD~1", cwd=source_repo)

    target = str(source_repo) if form == "folder" else f"file://{source_repo}"
    ws = acquire(target, tmp_path / "ws")
    assert not (ws.repo / "debug.env").exists() and not (ws.repo / "stash.env").exists()
    assert git("rev-parse", "HEAD", cwd=ws.repo) == git("rev-parse", "HEAD", cwd=source_repo)
    found = scan_history(ws.repo)
    assert len(found) == 3, [f.location for f in found]
    assert not any(key in repr(found) for key in keys)


# Red team 24, F3: a repository whose objects/info/alternates names another repository on the grading
# machine was graded as that repository's commit (local path, or a 16 KB zip of a `.git` with no objects).
def _borrowing_repo(tmp_path: Path, lender: Path) -> Path:
    borrower = tmp_path / "borrower"
    borrower.mkdir()
    git("init", "-q", "-b", "main", cwd=borrower)
    (borrower / ".git" / "objects" / "info" / "alternates").write_text(f"{lender / '.git' / 'objects'}\n")
    head = git("rev-parse", "main", cwd=lender).strip()
    (borrower / ".git" / "refs" / "heads" / "main").write_text(head + "\n")
    assert git("log", "--oneline", cwd=borrower).strip()  # git itself reads the lender's commits here
    return borrower


def test_a_repository_borrowing_another_ones_objects_is_refused(source_repo, tmp_path):
    borrower = _borrowing_repo(tmp_path, source_repo)
    with pytest.raises(BadInput, match=r"objects/info/alternates points git at another repository"):
        acquire(str(borrower), tmp_path / "ws")
    archive = tmp_path / "borrower.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("README.md", "my take-home\n")
        for path in sorted(borrower.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(borrower).as_posix())
    with pytest.raises(BadInput, match=r"objects/info/alternates"):
        acquire(str(archive), tmp_path / "ws-zip")


@pytest.mark.parametrize("name", ["config", "objects/info/alternates"])
def test_a_fifo_where_git_reads_is_refused_at_once_and_nothing_is_left_running(source_repo, tmp_path, name):
    """Red team 24, F4: a FIFO at .git/config blocked the clone for 300 s, then `sh` and `git-upload-pack`
    outlived the grade as root."""
    fifo = source_repo / ".git" / name
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(BadInput, match=r"is not a regular file"):
        acquire(str(source_repo), tmp_path / "ws")
    assert time.monotonic() - started < 60
    left = subprocess.run(["pgrep", "-f", f"upload-pack.*{source_repo}"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout


def test_a_git_command_that_times_out_takes_every_process_it_started_with_it(tmp_path):
    """The whole process group goes at the timeout: a git child blocked on a FIFO outlived the grade."""
    from grader.acquire import _git

    marker = f"git-child-stall-{os.getpid()}"
    stall = tmp_path / f"{marker}.sh"  # the shell's command line names it: pgrep finds a survivor
    stall.write_text("#!/bin/sh\nsleep 600 &\nwait\n")
    stall.chmod(0o755)
    (tmp_path / "home").mkdir()
    with pytest.raises(subprocess.TimeoutExpired):
        _git(["-c", f"alias.stall=!{stall}", "stall"], cwd=tmp_path, home=tmp_path / "home", timeout=2)
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout == "", left.stdout
