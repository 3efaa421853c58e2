"""The submission's own package, read statically, and the Python its venv is built on (no install here)."""

from __future__ import annotations

import os
from pathlib import Path

from grader import install
from grader.install import _drop_import_hooks, _open_site
from grader.interpreters import choose
from grader.project import read_project

_PLUGIN = (
    '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
    '[project]\nname = "plug"\nversion = "0"\nrequires-python = ">=3.10"\n'
    '[project.entry-points.llm]\nplug = "plug"\n'
)


def _write(repo: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text, encoding="utf-8")
    return repo


def test_a_plugin_is_installable_and_a_project_without_entry_points_is_not(tmp_path: Path) -> None:
    plugin = read_project(_write(tmp_path / "a", {"pyproject.toml": _PLUGIN}))
    assert plugin.installable and plugin.build_requires == ["hatchling"] and plugin.name == "plug"
    assert (plugin.requires_python, plugin.requires_python_where) == (">=3.10", "pyproject.toml:7")

    plain = _PLUGIN.split("[project.entry-points.llm]")[0]
    library = read_project(_write(tmp_path / "b", {"pyproject.toml": plain}))
    assert not library.installable
    assert library.why_not.startswith("it declares no entry points or scripts")

    # pip builds a [project] table without [build-system] with setuptools; uv's opt-out is honoured.
    no_backend = _PLUGIN.split("[project]")[1]
    assert read_project(_write(tmp_path / "c", {"pyproject.toml": "[project]" + no_backend})).installable
    opted_out = "[project]" + no_backend + "[tool.uv]\npackage = false\n"
    assert read_project(_write(tmp_path / "d", {"pyproject.toml": opted_out})).why_not == (
        "pyproject.toml sets [tool.uv] package = false"
    )


def test_a_build_requirement_from_a_url_means_no_build(tmp_path: Path) -> None:
    text = _PLUGIN.replace('["hatchling"]', '["hatchling @ https://evil.invalid/h.whl"]')
    project = read_project(_write(tmp_path, {"pyproject.toml": text}))
    assert not project.installable
    assert project.why_not.startswith("its build requirement pyproject.toml:2 is refused")


def test_a_built_projects_key_covers_its_whole_tree(tmp_path: Path) -> None:
    # Its build may run any file of the tree (a hook, an in-tree backend): another tree, another venv.
    one = read_project(_write(tmp_path / "one", {"pyproject.toml": _PLUGIN, "hatch_build.py": "x = 1\n"}))
    two = read_project(_write(tmp_path / "two", {"pyproject.toml": _PLUGIN, "hatch_build.py": "x = 2\n"}))
    same = read_project(_write(tmp_path / "same", {"pyproject.toml": _PLUGIN, "hatch_build.py": "x = 1\n"}))
    assert one.digest != two.digest and one.digest == same.digest


def test_the_python_note_says_when_no_interpreter_satisfies_the_project() -> None:
    base, uv = install._base_python(), install._uv_bin()
    fine = choose(base, uv, requires_python=">=3.10", where="pyproject.toml:5", python_version=None)
    assert fine.satisfied and fine.python == base and fine.target is None
    assert fine.note == f"Python {fine.version} ({base}), satisfies requires-python >=3.10 (pyproject.toml:5)"

    future = choose(base, uv, requires_python=">=3.99", where="pyproject.toml:5", python_version=None)
    assert not future.satisfied and future.target is None  # no 3.x release up to 3.39 admits it
    assert "no interpreter on this machine the sandbox can run satisfies requires-python >=3.99" in (
        future.note
    )
    assert future.note.endswith(f"the suite ran on {future.version} instead")

    pinned = choose(base, uv, requires_python=None, where="", python_version="3.99")
    assert pinned.note.endswith(
        "no interpreter on this machine the sandbox can run is the 3.99 its .python-version names"
    )


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return site


def test_an_editable_installs_import_hook_is_removed_and_its_folder_kept(tmp_path: Path) -> None:
    site, copy = _site(tmp_path), tmp_path / "copy"
    (copy / "src" / "plug").mkdir(parents=True)
    (site / "plug-0.dist-info").mkdir(parents=True)
    (site / "_plug.pth").write_text(f"{copy / 'src'}\n")
    finder = f"MAPPING: dict[str, str] = {{'other': '{copy / 'lib' / 'other'}'}}\nNAMESPACES = {{}}\n"
    (site / "__editable___other_0_finder.py").write_text(finder)
    (site / "__editable__.other-0.pth").write_text("import __editable___other_0_finder\n")
    (site / "plug").mkdir()  # a regular install's code
    (site / "plug" / "__init__.py").write_text("")
    fd = _open_site(tmp_path / "venv")
    assert fd is not None
    try:
        roots = _drop_import_hooks(fd, sorted(os.listdir(fd)), copy)
    finally:
        os.close(fd)
    assert roots == ["lib", "src"]
    assert sorted(p.name for p in site.iterdir()) == ["plug-0.dist-info"]


def test_a_build_that_swaps_site_packages_for_a_link_cannot_make_the_grader_delete_elsewhere(
    tmp_path: Path,
) -> None:
    site = _site(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me\n")
    fd = _open_site(tmp_path / "venv")
    assert fd is not None
    try:
        before = set(os.listdir(fd))
        # What build code could do between the grader's two listings: put a link in place of the folder.
        site.rename(site.with_name("moved"))
        site.symlink_to(elsewhere)
        _drop_import_hooks(fd, sorted(set(os.listdir(fd)) - before), tmp_path / "copy")
    finally:
        os.close(fd)
    assert (elsewhere / "precious.txt").read_text() == "keep me\n"
    # A venv whose site-packages is a link is not opened at all.
    assert _open_site(tmp_path / "venv") is None
