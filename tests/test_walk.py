"""grader/walk.py: the one walk of a checkout every check uses (skip set, links, caps, order)."""

from __future__ import annotations

import os
from pathlib import Path

from grader import walk
from grader.checks.loud_miss import scan_fallbacks
from grader.keyprobe import candidates

_FALLBACK = (
    "def answer(ask):\n    try:\n        return ask()\n    except CassetteMiss:\n        return {'a': 1}\n"
)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _rel(root: Path, paths) -> list[str]:
    return [p.relative_to(root).as_posix() for p in paths]


def test_files_come_sorted_folder_first_and_skip_vcs_and_third_party(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "b.py": "",
            "a.py": "",
            "pkg/z.py": "",
            "pkg/sub/y.py": "",
            ".git/hooks/x.py": "",
            ".venv/lib/m.py": "",
            "node_modules/n.py": "",
            "pkg/__pycache__/c.pyc": "",
            ".hidden/h.py": "",
            "env/e.py": "",
        },
    )
    assert _rel(root, walk.files(root)) == [
        "a.py", "b.py", ".hidden/h.py", "env/e.py", "pkg/z.py", "pkg/sub/y.py",
    ]  # fmt: skip
    assert _rel(root, walk.files(root, hidden=False, skip=walk.NOT_OWN_CODE)) == [
        "a.py", "b.py", "pkg/z.py", "pkg/sub/y.py",
    ]  # fmt: skip


def test_links_are_never_followed_and_only_yielded_when_asked(tmp_path: Path) -> None:
    root = _tree(tmp_path / "repo", {"real.json": "{}"})
    outside = _tree(tmp_path / "outside", {"secret.json": "{}"})
    (root / "to-file.json").symlink_to(outside / "secret.json")
    (root / "to-folder").symlink_to(outside)
    os.mkfifo(root / "pipe.json")

    assert _rel(root, walk.files(root)) == ["real.json"]
    assert _rel(root, walk.files(root, links=True)) == ["real.json", "to-file.json", "to-folder"]
    # Nor the top itself: a run that made its `.git` a link to `/` must not send a walk over the host.
    assert list(walk.files(root / "to-folder")) == []
    assert list(walk.files(root, under="to-folder")) == []
    assert list(walk.tree(root / "to-folder")) == []


def test_the_caps_stop_the_walk(tmp_path: Path) -> None:
    root = _tree(tmp_path, {f"f{i:02d}.txt": "x" * 100 for i in range(20)})
    assert len(list(walk.files(root, max_files=5))) == 5
    assert len(list(walk.files(root, max_bytes=350))) == 3
    assert _rel(root, walk.files(root, include=lambda name: name.endswith("7.txt"))) == ["f07.txt", "f17.txt"]


def test_folders_and_depth(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"a/b/c/d.txt": "", "a/top.txt": "", "e/f.txt": "", ".git/g/h.txt": ""})
    assert _rel(root, walk.folders(root, depth=2)) == ["a", "a/b", "e"]
    assert _rel(root, walk.files(root, depth=1)) == ["a/top.txt", "e/f.txt"]
    assert _rel(root, walk.files(root / "a", depth=0)) == ["a/top.txt"]


def test_loud_miss_reads_the_submissions_own_code_not_git_tests_or_links(tmp_path: Path) -> None:
    # The fallback scan used to glob every *.py, .git's included, with no cap.
    root = _tree(
        tmp_path / "repo",
        {
            "triage/agent.py": _FALLBACK,
            ".git/hooks/post_commit.py": _FALLBACK,
            "tests/helpers.py": _FALLBACK,
            "docs/example.py": _FALLBACK,
        },
    )
    (root / "triage" / "linked.py").symlink_to(root / "triage" / "agent.py")
    assert [f.location for f in scan_fallbacks(root)] == ["triage/agent.py:4"]


def test_key_function_candidates_come_from_importable_packages_only(tmp_path: Path) -> None:
    key = (
        "import hashlib\n\n\ndef key_for(payload):\n"
        "    return hashlib.sha256(repr(payload).encode()).hexdigest()\n"
    )
    root = _tree(
        tmp_path / "repo",
        {"pkg/__init__.py": "", "pkg/cassette.py": key, "loose/cassette.py": key, "tests/cassette.py": key},
    )
    assert candidates(root) == ["pkg.cassette:key_for"]


# --- tree: the os.walk-shaped walk of trees the grader manages (snapshot, venv, kept workspace) -------------


def test_tree_is_os_walk_top_down_with_links_among_the_names_never_entered(tmp_path: Path) -> None:
    root = _tree(tmp_path / "repo", {"b.txt": "", "a/x.txt": "", "a/sub/y.txt": "", "c/z.txt": ""})
    outside = _tree(tmp_path / "outside", {"secret.txt": ""})
    (root / "to-folder").symlink_to(outside)
    (root / "a" / "to-file").symlink_to(outside / "secret.txt")

    seen = [(os.path.relpath(d, root), names, files) for d, names, files in walk.tree(root)]

    assert seen == [
        (".", ["a", "c"], ["b.txt", "to-folder"]),
        ("a", ["sub"], ["to-file", "x.txt"]),
        ("a/sub", [], ["y.txt"]),
        ("c", [], ["z.txt"]),
    ]
    # What os.walk(followlinks=False) visits, in the same order: the same folders, the same names.
    expected = [
        (os.path.relpath(d, root), sorted(n for n in names if not os.path.islink(os.path.join(d, n))))
        for d, names, _files in _sorted_os_walk(root)
    ]
    assert [(d, names) for d, names, _ in seen] == expected


def _sorted_os_walk(root: Path):  # type: ignore[no-untyped-def]
    for d, names, files in os.walk(root, followlinks=False):
        names.sort()
        yield d, names, files


def test_tree_enters_the_folder_names_the_caller_leaves_and_stops_at_max_depth(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path, {"keep/k.txt": "", "drop/d.txt": "", "a/b/c/deep.txt": ""})
    visited = []
    for d, names, _files in walk.tree(root):
        names[:] = [n for n in names if n != "drop"]
        visited.append(os.path.relpath(d, root))
    assert visited == [".", "a", "a/b", "a/b/c", "keep"]

    shallow = [(os.path.relpath(d, root), names) for d, names, _ in walk.tree(root, max_depth=2)]
    # Two levels below the top are listed; the names at the last level are listed, not entered.
    assert shallow == [(".", ["a", "drop", "keep"]), ("a", ["b"]), ("drop", []), ("keep", [])]
    everything = [os.path.relpath(d, root) for d, _names, _files in walk.tree(root, max_depth=None)]
    assert everything == [".", "a", "a/b", "a/b/c", "drop", "keep"]
