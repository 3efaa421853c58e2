"""Reading a real git pack without git: every entry inflated, a cut or corrupt pack never raises."""

from __future__ import annotations

import subprocess
from pathlib import Path

from grader.gitpack import pack_bodies
from tests.helpers.git import GIT_ENV


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
    bodies = list(pack_bodies(data, budget=1 << 30))
    count = int.from_bytes(data[8:12], "big")
    assert len(bodies) == count
    text = b"".join(bodies)
    assert all(f"marker-{n:03d}".encode() in text for n in range(30))
    # Inserted text of every version is found, whether stored whole or as a delta against another.
    assert all(f"of version {n}\n".encode() in text for n in range(30))


def test_a_cut_or_corrupt_pack_yields_what_came_before_and_stops(tmp_path: Path) -> None:
    data = _packed_repo(tmp_path)
    whole = list(pack_bodies(data, budget=1 << 30))
    cut = list(pack_bodies(data[: len(data) // 2], budget=1 << 30))
    assert 0 < len(cut) < len(whole) and cut == whole[: len(cut)]
    corrupt = data[:200] + b"\xff" * 64 + data[264:]
    assert len(list(pack_bodies(corrupt, budget=1 << 30))) < len(whole)
    assert list(pack_bodies(b"PACK\0\0\0\x09" + data[8:], budget=1 << 30)) == []  # unknown version
    assert list(pack_bodies(b"not a pack", budget=1 << 30)) == []


def test_the_budget_bounds_what_is_inflated(tmp_path: Path) -> None:
    data = _packed_repo(tmp_path)
    assert sum(len(body) for body in pack_bodies(data, budget=5000)) <= 5000
