"""Git history: a key committed and later deleted is still found, at the commit that introduced it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from grader.secrets import Scanner, is_git_repo, scan_history, scan_tree
from grader.secrets.history import _cat_blobs, scan_history_with
from grader.secrets.samples import expand
from grader.secrets.tree import scan_tree_with
from tests.helpers.git import GIT_ENV

KEY = expand("sk-or-v1-{{hex:64}}", "history:openrouter")
OTHER = expand("hf_{{alpha:34}}", "history:hf")


def _git(repo: Path, *args: str, when: int = 0) -> str:
    env = {
        **os.environ,
        **GIT_ENV,
        "GIT_AUTHOR_DATE": f"2026-01-01T10:00:{when:02d}Z",
        "GIT_COMMITTER_DATE": f"2026-01-01T10:00:{when:02d}Z",
        "HOME": str(repo),
    }
    out = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _commit(repo: Path, message: str, when: int) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message, when=when)
    return _git(repo, "rev-parse", "--short=7", "HEAD")


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# triage\n")
    _commit(repo, "init", 1)
    return repo


def test_a_key_committed_then_deleted_is_found_at_its_introducing_commit(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "config.py").write_text(f'MODEL = "gpt-4o-mini"\nKEY = "{KEY}"\n')
    introduced = _commit(repo, "add config", 2)
    (repo / "config.py").write_text(f'MODEL = "gpt-4o"\nKEY = "{KEY}"\n# more\n')
    _commit(repo, "tweak config", 3)
    (repo / "config.py").write_text('MODEL = "gpt-4o"\nKEY = os.environ["OPENROUTER_API_KEY"]\n')
    _commit(repo, "remove key", 4)

    assert scan_tree(repo) == []
    (finding,) = scan_history(repo)
    assert finding.kind == "history"
    assert finding.location == f"{introduced}:config.py:2"
    assert KEY not in repr(finding)


def test_a_key_on_another_branch_only_is_found(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _git(repo, "checkout", "-q", "-b", "experiment")
    (repo / "notes.md").write_text(f"token: {OTHER}\n")
    commit = _commit(repo, "wip", 2)
    _git(repo, "checkout", "-q", "main")
    assert [f.location for f in scan_history(repo)] == [f"{commit}:notes.md:1"]


def test_a_key_in_tree_and_history_is_reported_once_per_kind(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "cassettes").mkdir()
    (repo / "cassettes" / "a.json").write_text(f'{{"headers": {{"authorization": "Bearer {KEY}"}}}}\n')
    (repo / "cassettes" / "b.json").write_text(f'{{"headers": {{"authorization": "Bearer {KEY}"}}}}\n')
    first = _commit(repo, "tapes", 2)
    (repo / "cassettes" / "a.json").write_text(
        f'{{"headers": {{"authorization": "Bearer {KEY}"}}, "x": 1}}\n'
    )
    _commit(repo, "edit tape", 3)

    tree = scan_tree(repo)
    assert sorted((f.kind, f.location) for f in tree) == [
        ("tape", "cassettes/a.json:1"),
        ("tape", "cassettes/b.json:1"),
    ]
    history = scan_history(repo)
    assert len(history) == 1
    assert history[0].commit == first


def test_history_statistics_count_commits_and_blobs(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    for i in range(3):
        (repo / f"f{i}.txt").write_text(f"version {i}\n")
        _commit(repo, f"c{i}", 2 + i)
    scanner = Scanner()
    assert scan_history_with(scanner, repo) == []
    assert scanner.stats.commits == 4
    assert scanner.stats.blobs == 4
    assert scanner.stats.bytes > 0


def test_a_plain_directory_has_no_history(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_text(KEY)
    assert not is_git_repo(tmp_path)
    assert scan_history(tmp_path) == []
    assert len(scan_tree(tmp_path)) == 1


def test_tree_then_history_with_one_scanner_matches_a_fresh_history_scan_without_rereading(
    tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    (repo / "cassettes").mkdir()
    tape = f'{{\n  "request": {{"headers": {{"authorization": "Bearer {KEY}"}}}}\n}}\n'
    (repo / "cassettes" / "a.json").write_text(tape)
    old_notes = f"draft\n\ntoken: {OTHER}\n"
    (repo / "notes.md").write_text(old_notes)
    (repo / "config.py").write_text(f'MODEL = "m"\nKEY = "{KEY}"\n')
    _commit(repo, "tapes and notes", 2)
    new_notes = "draft\n\ntoken: read from the environment\n"
    (repo / "notes.md").write_text(new_notes)
    _commit(repo, "scrub notes", 3)
    # Five blobs; only the first notes.md is not in the working tree.
    history_only = len(old_notes.encode())

    fresh = Scanner()
    cold = scan_history_with(fresh, repo)

    shared = Scanner()
    tree = scan_tree_with(shared, repo)
    assert {f.path for f in tree} == {"cassettes/a.json", "config.py"}
    before = shared.stats.bytes
    warm = scan_history_with(shared, repo)

    def facts(findings: list) -> list[tuple]:
        return [(f.rule, f.kind, f.commit, f.path, f.line, f.fingerprint, f.encoding) for f in findings]

    assert facts(warm) == facts(cold)
    assert {(f.path, f.line) for f in cold} >= {("notes.md", 3)}
    # Every blob is counted either way, but only the history-only one is read from git and scanned again.
    assert shared.stats.blobs == fresh.stats.blobs == 5
    assert shared.stats.bytes - before == history_only
    assert fresh.stats.bytes > history_only


def test_blobs_larger_than_the_pipe_are_read_whole_and_keys_after_them_found(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    filler = "".join(
        f"line {n} of a long recording\n" for n in range(120_000)
    )  # ~3.4 MB, over the 1 MiB pipe
    (repo / "big.txt").write_text(filler + f"token: {OTHER}\n")
    (repo / "small.txt").write_text(f"KEY={KEY}\n")
    sha = _commit(repo, "big and small", 2)
    for name in ("big.txt", "small.txt"):
        (repo / name).unlink()
    _commit(repo, "remove", 3)
    found = {(f.path, f.line, f.commit) for f in scan_history(repo)}
    assert found == {("big.txt", 120_001, sha), ("small.txt", 1, sha)}


def test_stopping_early_ends_the_git_reader(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    for n in range(40):
        (repo / f"f{n}.txt").write_text(f"file {n}\n" * 20_000)
    _commit(repo, "many", 2)
    shas = _git(repo, "rev-list", "--all", "--objects").split("\n")
    blobs = [line.split(" ")[0] for line in shas if line.endswith(".txt")]
    stream = _cat_blobs(repo, blobs)
    first_sha, first = next(stream)
    assert first_sha == blobs[0] and first.startswith(b"file ")
    stream.close()  # the rest is never read: git is killed, nothing hangs
    assert [sha for sha, _ in _cat_blobs(repo, blobs)] == blobs


def test_a_key_in_a_commit_message_a_tag_message_or_a_branch_name_is_found_there(tmp_path: Path) -> None:
    # Red team 4, F1: a clone carries these as surely as its files; the scan read only files.
    repo = _repo(tmp_path)
    message = f"tune prompt\n\nexport OPENROUTER_API_KEY={KEY}"
    _git(repo, "commit", "-q", "--allow-empty", "-m", message, when=2)
    said = _git(repo, "rev-parse", "--short=7", "HEAD")
    _git(repo, "tag", "-a", "v0", "-m", f"release\nHF_TOKEN={OTHER}", when=3)
    third = expand("sk-or-v1-{{hex:64}}", "history:branch-name")
    _git(repo, "branch", f"wip-{third}")

    assert scan_tree(repo) == []
    found = {f.location: f for f in scan_history(repo)}
    # refs are listed by name: refs/heads/main, then the branch named after a key (line 2)
    assert set(found) == {f"{said}:commit message:3", "tag v0:tag message:7", "refs:2"}, found
    assert all(f.kind == "history" for f in found.values())
    for secret in (KEY, OTHER, third):
        assert secret not in repr(found)


def test_a_key_as_a_commit_author_committer_or_e_mail_is_found_in_the_commit_header(tmp_path: Path) -> None:
    # Red team 12, F1: the identity lines travel with every clone (and show in `git log` and on the forge).
    repo = _repo(tmp_path)
    third = expand("sk-or-v1-{{hex:64}}", "history:author-email")
    who = {
        "GIT_AUTHOR_NAME": KEY,
        "GIT_COMMITTER_NAME": OTHER,
        "GIT_AUTHOR_EMAIL": f"{third}@example.com",
    }
    subprocess.run(
        ["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "readme"],
        env={**os.environ, **GIT_ENV, "HOME": str(repo), **who},
        check=True,
    )
    said = _git(repo, "rev-parse", "--short=7", "HEAD")
    found = {f.location for f in scan_history(repo)}
    # The raw object's header: tree (1), parent (2), author (3), committer (4).
    assert found == {f"{said}:commit header:3", f"{said}:commit header:4"}, found
    assert len(scan_history(repo)) == 3  # the author line holds two keys: its name and its e-mail


def test_the_same_key_in_many_commit_messages_is_one_finding_at_the_first(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    for when in (2, 3, 4):
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"try {when}: key {KEY}", when=when)
    first = _git(repo, "rev-list", "--reverse", "HEAD").splitlines()[1][:7]
    (finding,) = scan_history(repo)
    assert finding.location == f"{first}:commit message:1"


def test_a_key_at_the_end_of_a_big_blob_only_history_holds_is_found(tmp_path: Path) -> None:
    """Red team 5, G1 in history: a 20 MB log committed with a key on its last line, then deleted."""
    repo = _repo(tmp_path)
    line = b"2026-12-01 10:00:00 INFO request served in 12 ms for a customer\n"
    (repo / "server.log").write_bytes(line * (20 * 1024**2 // len(line)) + KEY.encode() + b"\n")
    introduced = _commit(repo, "add a log", 2)
    (repo / "server.log").unlink()
    _commit(repo, "drop the log", 3)
    scanner = Scanner()

    assert scan_tree_with(scanner, repo) == []
    (finding,) = scan_history_with(scanner, repo)

    assert finding.location.startswith(f"{introduced}:server.log:")
    assert scanner.stats.unscanned == []


def test_history_past_its_byte_cap_is_read_newest_first_and_the_rest_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team 5, G3: many versions of a large file (gigabytes from a small pack) are read newest first
    up to the cap; what is left is listed as not scanned, not silently skipped."""
    from grader.secrets import history

    repo = _repo(tmp_path)
    (repo / "app.log").write_text(f"run 0\nKEY={OTHER}\n" + "x" * 3000 + "\n")
    _commit(repo, "oldest log, with a key", 2)
    for n in range(1, 6):
        (repo / "app.log").write_text(f"run {n}\n" + "x" * 3000 + "\n")
        _commit(repo, f"log {n}", 2 + n)
    (repo / "app.log").write_text(f"run 9\nKEY={KEY}\n")
    newest = _commit(repo, "newest log, with a key", 9)
    (repo / "app.log").unlink()
    _commit(repo, "drop the log", 10)
    monkeypatch.setattr(history, "HISTORY_CAP", 8000)
    scanner = Scanner()

    found = scan_history_with(scanner, repo)

    assert [f.location for f in found] == [f"{newest}:app.log:2"]  # the oldest version was not reached
    (line,) = scanner.stats.unscanned
    assert line.startswith("git history: ") and "past the 8000 bytes read, newest commits first" in line
    monkeypatch.setattr(history, "HISTORY_CAP", 1 << 30)
    assert len(scan_history_with(Scanner(), repo)) == 2


def test_a_key_in_committed_bytecode_is_found_in_history(tmp_path: Path) -> None:
    """Red team 5, G9: a settings module with a key, deleted, its committed .pyc kept: read for the text it
    holds (marshal's length byte glued to the key is read past), in the tree and in history."""
    repo = _repo(tmp_path)
    (repo / "__pycache__").mkdir()
    marshalled = b"\xa7\r\r\n" + b"\0" * 12 + b"\xe3" + b"\0" * 20 + b"\xfa\x48" + KEY.encode()
    (repo / "__pycache__" / "settings.cpython-311.pyc").write_bytes(marshalled)
    added = _commit(repo, "bytecode", 2)
    scanner = Scanner()

    assert [f.location for f in scan_tree_with(scanner, repo)] == ["__pycache__/settings.cpython-311.pyc:2"]
    (finding,) = scan_history_with(scanner, repo)

    assert finding.location == f"{added}:__pycache__/settings.cpython-311.pyc:2"  # after the magic's \\n
    assert finding.encoding == "binary file's text"


def _blob(repo: Path, text: str) -> str:
    """A blob written to the object store, in no commit: its sha."""
    done = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-w", "--stdin"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_a_key_in_a_blob_only_a_tag_names_is_found_under_the_tag(tmp_path: Path) -> None:
    """Red team 8, R8-2: `git tag keyblob <blob>` puts a blob in every clone without any commit holding it;
    the history scan listed reachable objects by path and a tagged blob has none."""
    repo = _repo(tmp_path)
    blob = _blob(repo, f"OPENROUTER_API_KEY={KEY}\n")
    _git(repo, "tag", "keyblob", blob)
    other = _blob(repo, f"HF_TOKEN={OTHER}\n")
    _git(repo, "tag", "-a", "-m", "notes", "notes-blob", other)  # an annotated tag of a blob
    assert scan_tree(repo) == []
    found = sorted(f.location for f in scan_history(repo))
    assert found == ["unknown:refs/tags/keyblob:1", "unknown:refs/tags/notes-blob:1"], found
