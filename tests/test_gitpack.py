"""Reading a real git pack without git: every entry inflated, a cut or corrupt pack never raises."""

from __future__ import annotations

import subprocess
from pathlib import Path

from grader.gitpack import Allowance, pack_bodies
from tests.helpers.git import GIT_ENV


def _plenty() -> Allowance:
    return Allowance(1 << 30, 1 << 30)


def _packed_repo(tmp_path: Path) -> bytes:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**GIT_ENV, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    for n in range(30):
        # Versions of one file that differ a little: git stores most of them as deltas.
        (repo / "notes.txt").write_text("".join(f"line {i} of version {n}\n" for i in range(200)))
        git("add", "-A")
        git("commit", "-q", "-m", f"version {n} marker-{n:03d}")
    git("gc", "-q", "--aggressive")
    (pack,) = (repo / ".git" / "objects" / "pack").glob("*.pack")
    return pack.read_bytes()


def test_every_entry_of_a_pack_is_inflated_deltas_included(tmp_path: Path) -> None:
    data = _packed_repo(tmp_path)
    bodies = list(pack_bodies(data, _plenty()))
    count = int.from_bytes(data[8:12], "big")
    assert len(bodies) == count
    text = b"".join(bodies)
    assert all(f"marker-{n:03d}".encode() in text for n in range(30))
    # Inserted text of every version is found, whether stored whole or as a delta against another.
    assert all(f"of version {n}\n".encode() in text for n in range(30))


def test_a_cut_or_corrupt_pack_yields_what_came_before_and_stops(tmp_path: Path) -> None:
    data = _packed_repo(tmp_path)
    whole = list(pack_bodies(data, _plenty()))
    cut = list(pack_bodies(data[: len(data) // 2], _plenty()))
    assert 0 < len(cut) < len(whole) and cut == whole[: len(cut)]
    corrupt = data[:200] + b"\xff" * 64 + data[264:]
    assert len(list(pack_bodies(corrupt, _plenty()))) < len(whole)
    assert list(pack_bodies(b"PACK\0\0\0\x09" + data[8:], _plenty())) == []  # unknown version
    assert list(pack_bodies(b"not a pack", _plenty())) == []


def test_the_budget_bounds_what_is_inflated(tmp_path: Path) -> None:
    data = _packed_repo(tmp_path)
    assert sum(len(body) for body in pack_bodies(data, Allowance(5000, 1 << 30))) <= 5000


def test_entries_are_counted_whatever_they_inflate_to(tmp_path: Path) -> None:
    # Red team 14: a pack of millions of empty blobs (9 bytes each) cost minutes, far from any byte cap.
    import hashlib
    import zlib

    entry = bytes([0x30]) + zlib.compress(b"")  # a blob of size 0
    body = b"PACK" + (2).to_bytes(4, "big") + (100_000).to_bytes(4, "big") + entry * 100_000
    pack = body + hashlib.sha1(body, usedforsecurity=False).digest()  # git's trailer
    allowance = Allowance(1 << 30, 1000)
    assert len(list(pack_bodies(pack, allowance))) == 1000
    assert allowance.spent() and allowance.entries == 0
