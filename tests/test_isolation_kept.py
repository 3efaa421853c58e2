"""`grade --keep-workspace` leaves folders a reviewer will enter with git (issue 14, red-team finding 1).

The suite owned its checkout while it ran, `.git` included: whatever it wrote there (`core.fsmonitor`,
`core.pager`, a bare repository whose `core.worktree` points back at a tree) would run as the reviewer the
moment they type `git status` in the kept folder. The test builds a real submission whose suite plants all
of that, grades it with the real `grade` CLI, then runs real `git status` and `git log` in every kept folder.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PLANT = """
import os
import subprocess

PAYLOAD = {payload!r}


def _git(*args, cwd="."):
    subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_plants_git_config_for_the_reviewer():
    # The checkout's own .git (the suite owns it while it runs).
    for key, value in (
        ("core.fsmonitor", PAYLOAD),
        ("core.pager", PAYLOAD),
        ("core.hooksPath", "/nonexistent"),
        ("filter.evil.clean", PAYLOAD),
        ("filter.evil.smudge", PAYLOAD),
        ("diff.external", PAYLOAD),
    ):
        _git("config", key, value)
    with open(".gitattributes", "a") as out:
        out.write("* filter=evil diff=evil\\n")
    # A nested repository and a bare one whose worktree is the folder above it.
    os.makedirs("nested/inner", exist_ok=True)
    _git("init", "-q", "nested")
    _git("config", "core.fsmonitor", PAYLOAD, cwd="nested")
    _git("init", "-q", "--bare", "barejunk")
    _git("config", "core.bare", "false", cwd="barejunk")
    _git("config", "core.worktree", os.getcwd(), cwd="barejunk")
    _git("config", "core.fsmonitor", PAYLOAD, cwd="barejunk")
    # A .git *file* pointing at that bare repository.
    os.makedirs("linked", exist_ok=True)
    with open("linked/.git", "w") as out:
        out.write("gitdir: ../barejunk\\n")
    # Red-team F1 addendum: files any local user could change once they are root's again.
    os.makedirs("shared", exist_ok=True)
    os.chmod("shared", 0o3777)
    with open("shared/ww.txt", "w") as out:
        out.write("x")
    os.chmod("shared/ww.txt", 0o666)
    os.chmod("pyproject.toml", 0o666)
    import shutil
    shutil.copy("/usr/bin/id", "tool-id")
    os.chmod("tool-id", 0o6755)
    os.symlink("/etc", "link-etc")
    # The suite's HOME and log folder are kept too.
    home = os.environ.get("HOME", "")
    if home and os.access(home, os.W_OK):
        _git("init", "-q", home)
        _git("config", "core.fsmonitor", PAYLOAD, cwd=home)
"""


def _payload(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "RAN-AS-REVIEWER"
    script = tmp_path / "payload.sh"
    script.write_text(f"#!/bin/sh\necho ran >> {marker}\ncat >/dev/null 2>&1\nexit 0\n", encoding="utf-8")
    script.chmod(0o755)
    return script, marker


def _folders(root: Path) -> list[Path]:
    out = [root]
    for dirpath, dirnames, _files in os.walk(root, followlinks=False):
        out += [Path(dirpath, d) for d in dirnames]
    return out


def test_a_kept_workspace_is_safe_to_enter_with_git(tmp_path: Path, make_submission, grade_cli, grade_cache):
    script, marker = _payload(tmp_path)
    repo = make_submission({"pkg/__init__.py": "", "tests/test_plant.py": PLANT.format(payload=str(script))})
    # The control: the planted config is live for plain git (the attack is real).
    control = tmp_path / "control"
    shutil.copytree(repo, control, symlinks=True)
    subprocess.run(
        ["git", "config", "core.fsmonitor", str(script)], cwd=control, check=True, capture_output=True
    )
    (control / "pkg" / "__init__.py").write_text("# changed\n", encoding="utf-8")
    subprocess.run(["git", "status"], cwd=control, capture_output=True, check=False)
    assert marker.exists()
    marker.unlink()

    done = grade_cli(
        [str(repo), "--keep-workspace", "--format", "json", "--cache-dir", str(grade_cache), "--jobs", "1"],
        cwd=tmp_path,
    )
    assert done.returncode in (0, 3), done.stderr
    assert not marker.exists(), "the grader itself ran git with the suite's configuration"
    report = json.loads(done.stdout)
    note = next(n for n in report["notes"] if n.startswith("workspace kept at "))
    kept = Path(note.removeprefix("workspace kept at "))
    inert = next(n for n in report["notes"] if n.startswith("kept workspace: "))
    try:
        assert report["facts"]["replay"]["passed"] == 1, report["facts"]["replay"]
        # The checkout the suite ran in is still there, with the suite's changes ...
        assert (kept / "repo" / "barejunk").is_dir()
        assert "filter=evil" in (kept / "repo" / ".gitattributes").read_text(encoding="utf-8")
        # ... and its .git is the submitted one: git status shows what the suite changed.
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=kept / "repo", capture_output=True, text=True, check=False
        )
        assert status.returncode == 0, status.stderr
        assert ".gitattributes" in status.stdout
        folders = _folders(kept)
        assert len(folders) > 10
        for folder in folders:
            if not folder.is_dir() or folder.is_symlink():
                continue
            for args in (["status"], ["log", "-1"], ["diff"]):
                subprocess.run(["git", *args], cwd=folder, capture_output=True, check=False, timeout=60)
            assert not marker.exists(), f"git {args} in {folder} ran the submission's payload"
        # Nothing kept is writable by group or others, setuid, setgid or sticky (links aside).
        loose = []
        for folder in folders:
            for entry in [folder, *folder.iterdir()] if folder.is_dir() and not folder.is_symlink() else []:
                st = entry.lstat()
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o7022:
                    loose.append(f"{entry.relative_to(kept)} {oct(st.st_mode)}")
        assert not loose, loose[:10]
        assert (kept / "repo" / "shared" / "ww.txt").exists() and (kept / "repo" / "link-etc").is_symlink()
        # The note and stderr say what was done to the suite's git folders.
        assert ".git.inert" in inert and "repo/nested/.git" in inert, inert
        assert (kept / "repo" / "barejunk" / "HEAD.inert").is_file()
        assert (kept / "repo" / ".git.inert" / "config").is_file()  # the suite's, kept for reading
        assert ".git.inert" in done.stderr
    finally:
        shutil.rmtree(kept, ignore_errors=True)
