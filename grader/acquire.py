"""TARGET -> a fresh git checkout in a grader-owned workspace (git URL, local repo, directory, archive).

Nothing here runs submission code, and the user's own files are never written: a local repo is cloned, a
directory is copied, an archive is extracted with every member checked first. git runs with hooks, fsmonitor,
system/global config, prompts and submodules all off, so a hostile repository is just data.

The grader's own disk filling up (ENOSPC) while fetching is not the user's bad input: it raises NotAssessable
with ``no space left on device: workspace <folder>`` (``no_space`` and ``no_space_reason`` are shared with
the other pipeline steps).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import stat
import subprocess
import tarfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader import gitsafe
from grader.deeptree import MAX_DEPTH, prune_deep, remove_tree
from grader.errors import BadInput, NotAssessable
from grader.walk import tree

__all__ = [
    "Workspace",
    "acquire",
    "copy_checkout",
    "keep_pristine",
    "no_space",
    "no_space_reason",
    "no_space_text",
    "redact",
]

CLONE_TIMEOUT = 300.0
MAX_TOTAL_BYTES = 200 * 1024**2
MAX_FILES = 20_000
_URL = re.compile(r"^(https?|ssh|git|file)://", re.IGNORECASE)
_SCP = re.compile(r"^[\w.-]+@[\w.-]+:(?!//)")  # git@github.com:org/repo.git
_ARCHIVES = (".zip", ".tar.gz", ".tgz", ".tar")
# Folders a directory target may carry that are never part of a submission (and can be huge).
_SKIP_DIRS = {".venv", "venv", "node_modules", "__pycache__", ".tox", ".nox", ".mypy_cache", ".pytest_cache"}
_IDENTITY = {
    "GIT_AUTHOR_NAME": "cassette grader",
    "GIT_AUTHOR_EMAIL": "grader@localhost",
    "GIT_COMMITTER_NAME": "cassette grader",
    "GIT_COMMITTER_EMAIL": "grader@localhost",
    # A fixed date: the same folder always yields the same commit sha.
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
# Protocols a target URL may use; everything else (ext::, ...) stays off (grader/gitsafe.py).
_PROTOCOLS = ("file", "https", "http", "git", "ssh")


@dataclass(frozen=True)
class Workspace:
    root: Path
    repo: Path  # the checkout submission code runs in: the replay suite owns it while it runs
    commit: str | None  # None for a plain folder or an archive without .git: the snapshot is not theirs
    source: str
    # A local repository's changes that were not committed (``git status --porcelain`` lines): not graded.
    uncommitted: tuple[str, ...] = ()
    # The checkout as acquired, copied before any submission code ran; grader-owned and read-only to the
    # sandbox user. Every static check, the history scan and every probe's scratch copy read this one.
    pristine: Path | None = None
    # Folders removed from the checkout because they were nested deeper than grader/deeptree.MAX_DEPTH.
    pruned: tuple[str, ...] = ()
    # An archive's own `.git`, as shipped (its config, reflogs, objects no ref reaches): the hiring team
    # received all of it. Kept grader-owned outside the checkout, only read (never by git) by the secret scan.
    shipped_git: Path | None = None


# --- the grader's own disk --------------------------------------------------------------------------------

_NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FEW_FILES = 10_000  # free files (inodes) below this are named in the reason
# How tools the grader runs (git, uv, pip, Python) say ENOSPC; only read from the grader's own tools' output.
_NO_SPACE_TEXT = re.compile(r"no space left on device|disk quota exceeded|\[errno 28\]|os error 28", re.I)


def no_space(exc: BaseException | None) -> bool:
    """True when ``exc`` (or an exception it wraps) is the disk being full: ENOSPC or EDQUOT."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS:
            return True
        if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list):
            # copytree collects (src, dst, why) per file; only `why` is the grader's text, not a file name.
            if any(
                isinstance(e, tuple) and len(e) == 3 and _NO_SPACE_TEXT.search(str(e[2])) for e in exc.args[0]
            ):
                return True
        exc = exc.__cause__ or exc.__context__
    return False


def no_space_text(output: str) -> bool:
    """True when a grader tool's output (git, uv, pip) reports a full disk; ``remote:`` lines are ignored."""
    lines = (line for line in output.splitlines() if not line.lstrip().lower().startswith("remote:"))
    return any(_NO_SPACE_TEXT.search(line) for line in lines)


def no_space_reason(where: str, path: Path | str) -> str:
    """The one reason every step gives: ``no space left on device: <where> <path> (<free> free)``; the free
    files too when they, not the bytes, ran out (red team 30: "8387276 KiB free" named no shortage)."""
    try:
        st = os.statvfs(path)
        room = f" ({st.f_bavail * st.f_frsize // 1024} KiB free"
        room += f", {st.f_favail:,} files free)" if st.f_files and st.f_favail < _FEW_FILES else ")"
    except OSError:
        room = ""
    return f"no space left on device: {where} {path}{room}"


def redact(text: str) -> str:
    """Hide ``user:password@`` (or a bare token) in any URL inside ``text``."""
    return re.sub(r"(?<=://)[^/@\s]+@", "***@", text)


def _git(
    args: list[str],
    *,
    cwd: Path,
    home: Path,
    timeout: float = CLONE_TIMEOUT,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = gitsafe.argv(*args, protocols=_PROTOCOLS)
    # A session of its own: on a timeout every process git started (`git-upload-pack` under a shell, for a
    # local clone) is killed with it; red team 24, F4: one blocked on a FIFO outlived the grade as root.
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=gitsafe.env(home, extra_env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _clone_error(source: str, stderr: str, code: int) -> BadInput:
    low = stderr.lower()
    if "not found" in low or "does not appear to be a git repository" in low or "does not exist" in low:
        why = "repository not found"
    elif "could not resolve host" in low or "name or service not known" in low:
        why = "host not found"
    elif "connection refused" in low or "unable to connect" in low or "connection timed out" in low:
        why = "cannot connect"
    elif "authentication" in low or "could not read username" in low or "permission denied" in low:
        why = (
            "authentication required (pass a URL the grader can read, or clone it yourself and pass the path)"
        )
    else:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        why = lines[-1].strip() if lines else "unknown error"
    return BadInput(f"cannot clone {redact(source)}: {redact(why)} (git exit {code})")


# Files of a local repository git reads while serving a clone. Red team 24: a FIFO there blocked the clone
# (F4); alternates made git serve another repository's objects as the submission's (F3).
_READ_BY_GIT = ("HEAD", "config", "packed-refs", "shallow", "commondir", "info/grafts")
_BORROWING = ("objects/info/alternates", "objects/info/http-alternates", "commondir")


def _check_local_git(path: Path, source: str) -> None:
    """Refuse a local repository git could not serve as itself: a file it reads that is not a regular one,
    or objects borrowed from another repository."""
    gitdir = path / ".git" if (path / ".git").is_dir() else path
    for rel in (*_READ_BY_GIT, *_BORROWING):
        try:
            info = os.lstat(gitdir / rel)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(
                f"{redact(source)}: .git/{rel} is not a regular file (a FIFO, a link or a device): git would "
                "block on it or read another file; grade a fresh clone of the repository"
            )
        if rel in _BORROWING and info.st_size:
            raise BadInput(
                f"{redact(source)}: .git/{rel} points git at another repository's objects, which would be "
                "graded as this one's; grade a clone made with `git clone --no-local`"
            )


def _clone(url: str, ref: str | None, root: Path, source: str) -> Path:
    repo = root / "repo"
    home = root / ".git-home"
    if url.lower().startswith("file://"):
        _check_local_git(Path(url[len("file://") :]), source)
    elif not (_URL.match(url) or _SCP.match(url)):
        _check_local_git(Path(url), source)
    try:
        done = _git(
            # --no-local: a local source goes through the pack protocol, like a remote one: no shared inodes
            # with the user's repo and, unlike --no-hardlinks (git 2.39 fails copying 10,000 loose objects),
            # copies only the reachable objects.
            # --template= (none): no sample hooks, description or info/exclude, files every copy of the
            # checkout (the pristine one, each probe's scratch copy) would carry for nothing.
            [
                "clone",
                "--no-recurse-submodules",
                # The commit's tree is measured before any file is written (`_check_tree`).
                "--no-checkout",
                "--no-local",
                "--template=",
                "--quiet",
                "--",
                url,
                str(repo),
            ],
            cwd=root,
            home=home,
        )
    except subprocess.TimeoutExpired:
        raise BadInput(f"cannot clone {redact(source)}: timed out after {CLONE_TIMEOUT:.0f}s") from None
    if done.returncode != 0:
        if no_space_text(done.stderr):
            raise NotAssessable(no_space_reason("workspace", root))
        raise _clone_error(source, done.stderr, done.returncode)
    _harden(repo, home)
    _fetch_other_refs(repo, home)
    if ref:
        _checkout(repo, ref, home, source)
    elif _git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=repo, home=home).returncode == 0:
        _check_tree(repo, "HEAD", home, source)
        done = _git(["reset", "--hard", "--quiet", "HEAD"], cwd=repo, home=home)
        if done.returncode != 0:
            raise BadInput(
                f"{redact(source)}: cannot check out HEAD: {done.stderr.strip().splitlines()[-1:]}"
            )
    return repo


# A clone brings branches and tags. Notes, the stash and refs of any other namespace are in the submitted
# repository too, and anyone can fetch them from it (red team 13, F2: a key in a git note, a stash or
# `refs/backup/wip` scored no-credentials 3). They are kept under `refs/submitted/`, where the history
# scans read every ref; nothing checks them out.
_OTHER_REFS = ("+refs/*:refs/submitted/*", "^refs/heads/*", "^refs/tags/*")


def _fetch_other_refs(repo: Path, home: Path) -> None:
    done = _git(
        ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "origin", *_OTHER_REFS],
        cwd=repo,
        home=home,
    )
    if done.returncode != 0 and no_space_text(done.stderr):
        raise NotAssessable(no_space_reason("workspace", repo.parent))


def _check_tree(repo: Path, commit: str, home: Path, source: str) -> None:
    """Refuse a commit whose tree holds more than the archive caps allow, before any file is written.

    git stores a tree once however often it is referenced, so a repository of a few kilobytes can name
    millions of files (red team 4, F2: 100,000 files from 0.7 MB, each copy of the checkout taking minutes
    and the workspace disk). The listing is read as git writes it and stopped at the cap.
    """
    argv = gitsafe.argv("ls-tree", "-r", "-l", "-z", "--full-tree", commit, protocols=_PROTOCOLS)
    files = total = 0
    with subprocess.Popen(
        argv, cwd=repo, env=gitsafe.env(home, None), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as proc:
        assert proc.stdout is not None
        pending = b""
        try:
            while chunk := proc.stdout.read(1 << 16):
                *records, pending = (pending + chunk).split(b"\0")
                for record in records:
                    files += 1
                    size = record.split(b"\t", 1)[0].split()[-1:]
                    total += int(size[0]) if size and size[0].isdigit() else 0
                if files > MAX_FILES or total > MAX_TOTAL_BYTES:
                    break
        finally:
            proc.kill()
    if files > MAX_FILES:
        raise BadInput(
            f"{redact(source)}: the commit holds more than {MAX_FILES} files; a submission is a small "
            "project (grade a clone without generated or vendored files)"
        )
    if total > MAX_TOTAL_BYTES:
        raise BadInput(
            f"{redact(source)}: the commit holds more than {MAX_TOTAL_BYTES // 1024**2} MB of files; a "
            "submission is a small project (grade a clone without generated or vendored files)"
        )


def _harden(repo: Path, home: Path) -> None:
    # Later grader git commands on this checkout (history scans) inherit the safe settings.
    for item in ("core.hooksPath=/dev/null", "core.fsmonitor=false"):
        key, _, value = item.partition("=")
        _git(["config", key, value], cwd=repo, home=home)


def _checkout(repo: Path, ref: str, home: Path, source: str) -> None:
    for candidate in (ref, f"origin/{ref}", f"refs/tags/{ref}"):
        found = _git(["rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"], cwd=repo, home=home)
        if found.returncode == 0:
            sha = found.stdout.strip()
            break
    else:
        fetched = _git(["fetch", "--quiet", "origin", ref], cwd=repo, home=home)
        if fetched.returncode != 0:
            raise BadInput(f"{redact(source)}: no branch, tag or commit named {ref!r}")
        sha = _git(["rev-parse", "FETCH_HEAD"], cwd=repo, home=home).stdout.strip()
    _check_tree(repo, sha, home, source)
    done = _git(["checkout", "--quiet", "--detach", sha], cwd=repo, home=home)
    if done.returncode != 0:
        raise BadInput(f"{redact(source)}: cannot check out {ref!r}: {done.stderr.strip().splitlines()[-1:]}")


def _commit_snapshot(repo: Path, root: Path) -> None:
    home = root / ".git-home"
    # A `.git` the submission shipped (a file saying `gitdir: /elsewhere`, a folder with its own config and
    # filter drivers, a link) would make the grader's git, as root, commit into another repository or run
    # the archive's filter commands. The snapshot's history is the grader's own: every `.git` goes first.
    for dirpath, dirnames, filenames in tree(repo):
        if ".git" in dirnames:
            remove_tree(Path(dirpath, ".git"))
            dirnames.remove(".git")
        if ".git" in filenames:  # a `gitdir:` file or a link
            os.unlink(os.path.join(dirpath, ".git"))
    # No template files, and the objects `add` wrote loose (a folder per first byte) packed into one file:
    # a grade copies this checkout once per probe, and folders cost the most to make and to remove
    # (the sample's .git: 150 entries, 73 of them folders, down to about 20). No delta search
    # (--window=0): the pack costs what the loose objects did, whatever the blobs. No automatic gc after the
    # commit (past 6,700 loose objects git would start one in the background, racing the repack).
    for args in (
        ["init", "--quiet", "--template="],
        ["add", "--all"],
        ["-c", "gc.auto=0", "commit", "--quiet", "--allow-empty", "-m", "snapshot"],
        ["repack", "-a", "-d", "-q", "-n", "--window=0"],
    ):
        done = _git(args, cwd=repo, home=home, extra_env=_IDENTITY)
        if done.returncode != 0 and no_space_text(done.stderr):
            raise NotAssessable(no_space_reason("workspace", root))
        if done.returncode != 0:
            raise BadInput(f"cannot snapshot {repo} into git: {done.stderr.strip()[:200]}")
    _harden(repo, home)


def _drop_bytecode(repo: Path) -> None:
    """Delete committed Python bytecode from the checkout before anything runs.

    Python loads a module's ``__pycache__`` entry instead of its source when the entry says it is current,
    and an *unchecked* hash-based .pyc (PEP 552) always says so; a lone ``x.pyc`` imports with no ``x.py``
    at all. Either way the code that ran would not be the code the checks read and the reviewer sees. The
    history scan still reads the committed blobs.
    """
    for dirpath, dirnames, filenames in tree(repo, max_depth=None):
        if Path(dirpath) == repo:
            dirnames[:] = [d for d in dirnames if d != ".git"]
        if "__pycache__" in dirnames:
            shutil.rmtree(os.path.join(dirpath, "__pycache__"))
            dirnames.remove("__pycache__")
        for name in filenames:
            path = os.path.join(dirpath, name)
            # A link named __pycache__ too: it could point the lookup at bytecode planted elsewhere.
            if name.endswith((".pyc", ".pyo")) or (name == "__pycache__" and os.path.islink(path)):
                os.unlink(path)


def _copy_tree(src: Path, dest: Path) -> None:
    """Copy without following links: symlinks stay symlinks, special files are skipped."""
    files = total = 0
    dest.mkdir()
    for dirpath, dirnames, filenames in tree(src):
        rel = Path(dirpath).relative_to(src)
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        if len(rel.parts) + 1 >= MAX_DEPTH:
            dirnames[:] = []  # not even created: the copy keeps what pruning keeps (grader/deeptree.py)
        for name in (*dirnames, *filenames):
            s, d = Path(dirpath) / name, dest / rel / name
            st = os.lstat(s)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
            elif stat.S_ISDIR(st.st_mode):
                d.mkdir()
            elif stat.S_ISREG(st.st_mode):
                files += 1
                total += st.st_size
                if files > MAX_FILES or total > MAX_TOTAL_BYTES:
                    raise BadInput(
                        f"directory {src} is too large to grade (over {MAX_FILES} files or "
                        f"{MAX_TOTAL_BYTES // 1024**2} MB); pass the repository instead"
                    )
                shutil.copy2(s, d, follow_symlinks=False)


# --- archives ----------------------------------------------------------------------------------------------


def _safe_member(archive: str, name: str) -> PurePosixPath:
    norm = name.replace("\\", "/")
    path = PurePosixPath(norm)
    if norm.startswith("/") or re.match(r"^[A-Za-z]:", norm):
        raise BadInput(f"archive {archive}: member {name} has an absolute path")
    if ".." in path.parts:
        raise BadInput(f"archive {archive}: member {name} escapes the target")
    return path


def _check_link(archive: str, member: PurePosixPath, target: str) -> None:
    if target.startswith("/") or ".." in PurePosixPath(os.path.normpath(str(member.parent / target))).parts:
        raise BadInput(f"archive {archive}: link {member} -> {target} points outside the archive")


def _no_link_on_the_way(archive: str, dest: Path, member: PurePosixPath, name: str) -> None:
    """Refuse a member whose folders include a link an earlier member made.

    A lexical check cannot see a chain (``vendor/d -> .``, ``vendor/up -> d/d/../../..``): it normalizes
    inside the archive and resolves outside it, and a member written through it lands anywhere on disk.
    """
    here = dest
    for part in member.parts[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return  # made below by mkdir, as a real folder
        if stat.S_ISLNK(st.st_mode):
            rel = here.relative_to(dest).as_posix()
            raise BadInput(f"archive {archive}: member {name} is written through the link {rel}")
        if not stat.S_ISDIR(st.st_mode):
            raise BadInput(f"archive {archive}: member {name} is below a file, not a folder")


def _check_resolved(archive: str, dest: Path, link: Path, member: PurePosixPath, target: str) -> None:
    """Refuse a link that resolves outside the archive on disk (through earlier links), whatever it reads."""
    top = os.path.realpath(dest)
    real = os.path.realpath(link)
    if real != top and not real.startswith(top + os.sep):
        raise BadInput(f"archive {archive}: link {member} -> {target} resolves outside the archive")


def _check_caps(archive: str, files: int, total: int) -> None:
    if files > MAX_FILES:
        raise BadInput(f"archive {archive}: more than {MAX_FILES} files")
    if total > MAX_TOTAL_BYTES:
        raise BadInput(f"archive {archive}: more than {MAX_TOTAL_BYTES // 1024**2} MB uncompressed")


def _extract_zip(path: Path, dest: Path) -> None:
    name = path.name
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BadInput(f"archive {name}: not a readable zip file ({exc})") from None
    with zf:
        infos = zf.infolist()
        _check_caps(name, len(infos), sum(i.file_size for i in infos))
        written = 0
        for info in infos:
            member = _safe_member(name, info.filename)
            # Only Unix-made zips carry a file type in the high bits; 0 there means a regular file.
            mode = info.external_attr >> 16 if info.create_system == 3 else 0
            kind = stat.S_IFMT(mode)
            out = dest / member
            _no_link_on_the_way(name, dest, member, info.filename)
            if info.is_dir():
                out.mkdir(parents=True, exist_ok=True)
                continue
            if kind and kind not in (stat.S_IFREG, stat.S_IFLNK):
                raise BadInput(f"archive {name}: member {info.filename} is a device or special file")
            out.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(out):
                raise BadInput(f"archive {name}: member {info.filename} appears twice")
            if kind == stat.S_IFLNK:
                target = zf.read(info).decode("utf-8", errors="replace")
                _check_link(name, member, target)
                os.symlink(target, out)
                _check_resolved(name, dest, out, member, target)
                continue
            # Count real bytes: a zip bomb can declare small sizes. O_EXCL|O_NOFOLLOW: never through a link.
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            with zf.open(info) as src, os.fdopen(os.open(out, flags, 0o644), "wb") as dst:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    _check_caps(name, 0, written)
                    dst.write(chunk)


def _extract_tar(path: Path, dest: Path) -> None:
    name = path.name
    try:
        tf = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise BadInput(f"archive {name}: not a readable tar file ({exc})") from None
    with tf:
        members = tf.getmembers()
        _check_caps(name, len(members), sum(m.size for m in members if m.isfile()))
        for m in members:
            member = _safe_member(name, m.name)
            if m.isdev() or not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
                raise BadInput(f"archive {name}: member {m.name} is a device or special file")
            if m.issym():
                _check_link(name, member, m.linkname)
            elif m.islnk():
                _safe_member(name, m.linkname)
        try:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, members=members, filter="data")
            else:  # pragma: no cover - Python without extraction filters; members were checked above
                tf.extractall(dest, members=members)  # noqa: S202
        except (tarfile.TarError, OSError) as exc:
            if no_space(exc):
                raise
            raise BadInput(f"archive {name}: cannot extract safely ({exc})") from None


def _real_git_dir(top: Path) -> bool:
    """``top/.git`` is a folder of its own, not a link or a `gitdir:` file pointing somewhere else."""
    git = top / ".git"
    return git.is_dir() and not git.is_symlink()


def _from_archive(path: Path, root: Path, source: str) -> tuple[Path, bool, Path | None]:
    staging = root / ".extract"
    staging.mkdir()
    if path.name.lower().endswith(".zip"):
        _extract_zip(path, staging)
    else:
        _extract_tar(path, staging)
    entries = list(staging.iterdir())
    top = entries[0] if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink() else staging
    repo = root / "repo"
    if _real_git_dir(top):
        # Clone rather than trust the archived .git/config (fsmonitor, hooks): only its objects are used.
        _clone(str(top), None, root, source)
        shipped = root / "shipped-git"
        (top / ".git").rename(shipped)
        shipped.chmod(0o700)
        shutil.rmtree(staging, ignore_errors=True)
        return repo, False, shipped
    top.rename(repo)
    shutil.rmtree(staging, ignore_errors=True)
    _commit_snapshot(repo, root)
    return repo, True, None


# --- entry point ------------------------------------------------------------------------------------------


def _split_ref(target: str) -> tuple[str, str | None]:
    if "#" in target and not os.path.exists(target):
        base, _, ref = target.rpartition("#")
        return base, ref or None
    return target, None


def acquire(target: str, root: Path) -> Workspace:
    """Fetch TARGET into ``root/"repo"`` as a git checkout with full history.

    Raises BadInput for an unusable target, NotAssessable when the grader's own disk is full.
    """
    try:
        return _acquire(target, Path(root))
    except OSError as exc:
        if no_space(exc):
            raise NotAssessable(no_space_reason("workspace", root)) from None
        raise


def _acquire(target: str, root: Path) -> Workspace:
    root.mkdir(parents=True, exist_ok=True)
    # The sandbox runs submission code as an unprivileged user, which must be able to enter the workspace.
    root.chmod(0o755)
    source = redact(target)
    where, ref = _split_ref(target)
    snapshot = False
    shipped_git: Path | None = None
    uncommitted: tuple[str, ...] = ()
    if _URL.match(where) or _SCP.match(where):
        repo = _clone(where, ref, root, target)
    else:
        path = Path(where).expanduser()
        if not path.exists():
            raise BadInput(f"no such file or directory: {where}")
        path = path.resolve()
        if path.is_file() and path.name.lower().endswith(_ARCHIVES):
            repo, snapshot, shipped_git = _from_archive(path, root, target)
        elif path.is_file():
            raise BadInput(f"{where}: not a directory, git repository or .zip/.tar.gz/.tgz archive")
        elif (path / ".git").is_symlink() or (path / ".git").is_file():
            raise BadInput(
                f"{where}/.git is not a folder (a worktree, a submodule or a link points it at another "
                "repository): grade the repository itself, or a fresh clone of it"
            )
        elif _real_git_dir(path) or ((path / "HEAD").is_file() and (path / "objects").is_dir()):
            repo = _clone(str(path), ref, root, target)
            uncommitted = _uncommitted(repo, path, root / ".git-home") if ref is None else ()
        else:
            repo = root / "repo"
            _copy_tree(path, repo)
            _commit_snapshot(repo, root)
            snapshot = True
    head = _git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=repo, home=root / ".git-home")
    if head.returncode != 0:
        raise BadInput(f"{source}: the repository has no commits")
    pruned = tuple(prune_deep(repo))
    _drop_bytecode(repo)
    commit = None if snapshot else head.stdout.strip()
    pristine = keep_pristine(repo, root / "pristine")
    return Workspace(
        root=root,
        repo=repo,
        commit=commit,
        source=source,
        uncommitted=uncommitted,
        pristine=pristine,
        pruned=pruned,
        shipped_git=shipped_git,
    )


def _uncommitted(clone: Path, source: Path, home: Path) -> tuple[str, ...]:
    """What the user's working tree holds that its HEAD does not: ``git status --porcelain`` lines.

    Run with our clone's git directory (hardened config, no filters or fsmonitor of theirs) over their
    working tree, so no configuration from the submission runs; it writes only our clone's index. Nothing
    of it is graded: the report says so. Best effort: on any failure, nothing is listed.
    """
    if (source / ".git").is_file() or not (source / ".git").is_dir():
        return ()  # a worktree or a bare repository: no working tree of its own to compare
    args = ["--git-dir", str(clone / ".git"), "--work-tree", str(source), "status", "--porcelain"]
    try:
        done = _git([*args, "--untracked-files=all"], cwd=clone, home=home)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if done.returncode != 0:
        return ()
    return tuple(line for line in done.stdout.splitlines() if line.strip())


# --- the pristine copy ------------------------------------------------------------------------------------


def copy_checkout(source: Path, dest: Path) -> None:
    """Copy what is inside ``source`` into the existing folder ``dest``; links are copied as links.

    `cp -a` when it works: a grade makes five copies of the checkout (most of it small files under .git) and
    cp spends about half the CPU of shutil.copytree on them. Where cp is missing or fails, copytree does the
    copy again and raises the OSError a full disk or a bad path deserves.
    """
    try:
        done = subprocess.run(
            ["cp", "-a", "--", f"{source}{os.sep}.", str(dest)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    except OSError:
        done = None
    if done is None or done.returncode != 0:
        shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)


def keep_pristine(repo: Path, dest: Path) -> Path:
    """Copy ``repo`` to ``dest`` before any submission code runs, and make the copy read-only to others.

    The copy belongs to the grader; no group or other write bit is left on anything in it and ``dest``
    itself is ``0700``, so a sandboxed run (another uid) can neither write nor read it. Raises OSError
    (a full disk: the caller's NotAssessable).
    """
    dest.mkdir(mode=0o700)
    try:
        copy_checkout(repo, dest)
        for dirpath, dirnames, filenames in tree(dest, max_depth=None):
            for name in (*dirnames, *filenames):
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                    os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o022)
        dest.chmod(0o700)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest
