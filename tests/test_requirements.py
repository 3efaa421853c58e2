"""What the grader hands the installer: only requirements it parsed itself; every other line is refused
with its file:line, and a line that is not a requirement is the submission's failure (docs/security.md)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from grader.requirements import grader_tools, read_dependencies


def _pins() -> list[str]:
    return [f"{name}=={version}" for name, version in grader_tools().items()]


def _refused(deps) -> dict[str, str]:
    return {p.location: p.text for p in deps.refused}


def test_installer_options_paths_and_urls_are_refused_with_their_line(tmp_path: Path) -> None:
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "more.txt").write_text("pluggy\n--extra-index-url https://evil.invalid/x\n")
    (tmp_path / "requirements.txt").write_text(
        "# runtime\n"
        "iniconfig  # parses ini files\n"
        "-r reqs/more.txt\n"
        "-r ../../etc/passwd\n"
        "-e .\n"
        "./vendored/pkg\n"
        "https://example.invalid/x.whl\n"
        "--index-url https://evil.invalid/simple\n"
        "--find-links /tmp/wheelhouse\n"
        "-f /tmp/other\n"
        "--trusted-host evil.invalid\n"
        "-i https://evil.invalid/simple\n"
        "evil @ https://evil.invalid/evil-1.0.tar.gz\n"
        "git+https://evil.invalid/evil.git\n"
        "file:../outside\n"
        "-c /etc/constraints.txt\n"
        "httpx==0.28.1 --hash=sha256:0000 \\\n"
        "    --config-settings=editable_mode=compat\n"
    )
    deps = read_dependencies(tmp_path)
    assert deps.requirements == sorted(["httpx==0.28.1", "iniconfig", "pluggy", *_pins()])
    assert deps.invalid == []
    assert _refused(deps) == {
        "reqs/more.txt:2": "--extra-index-url https://evil.invalid/x",
        "requirements.txt:4": "-r ../../etc/passwd",
        "requirements.txt:5": "-e .",
        "requirements.txt:6": "./vendored/pkg",
        "requirements.txt:7": "https://example.invalid/x.whl",
        "requirements.txt:8": "--index-url https://evil.invalid/simple",
        "requirements.txt:9": "--find-links /tmp/wheelhouse",
        "requirements.txt:10": "-f /tmp/other",
        "requirements.txt:11": "--trusted-host evil.invalid",
        "requirements.txt:12": "-i https://evil.invalid/simple",
        "requirements.txt:13": "evil @ https://evil.invalid/evil-1.0.tar.gz",
        "requirements.txt:14": "git+https://evil.invalid/evil.git",
        "requirements.txt:15": "file:../outside",
        "requirements.txt:16": "-c /etc/constraints.txt",
        "requirements.txt:17": "--config-settings=editable_mode=compat",
    }
    why = {p.location: p.why for p in deps.refused}
    assert why["requirements.txt:9"].startswith("an installer option (--find-links)")
    assert why["requirements.txt:13"].startswith("a direct URL reference")
    # Nothing the installer reads names a path, a URL or an option.
    assert not any(r.startswith("-") or "/" in r or ":" in r for r in deps.requirements)


def test_pyproject_dependencies_extras_and_groups_are_vetted_too(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[project]\n"
        'name = "sub"\n'
        'version = "0"\n'
        'dependencies = ["httpx>=0.27", "sub[test]", "evil @ file:///tmp/evil"]\n'
        "[project.optional-dependencies]\n"
        'test = ["respx", "--find-links=/tmp/x"]\n'
        'docs = ["sphinx"]\n'
        "[dependency-groups]\n"
        'lint = ["ruff", "git+https://evil.invalid/x"]\n'
        'dev = [{include-group = "lint"}, "mypy"]\n'
    )
    (tmp_path / "requirements.txt").write_text("ignored-when-pyproject-declares\n")
    deps = read_dependencies(tmp_path)
    assert deps.requirements == sorted(["httpx>=0.27", "mypy", "respx", "ruff", *_pins()])
    assert _refused(deps) == {
        "pyproject.toml:4": "evil @ file:///tmp/evil",
        "pyproject.toml:6": "--find-links=/tmp/x",
        "pyproject.toml:9": "git+https://evil.invalid/x",
    }


def test_a_line_that_is_not_a_requirement_is_invalid_with_the_parse_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "sub"\nversion = "0"\ndependencies = [\n  "httpx",\n  "pyopenssl>>1",\n]\n'
    )
    deps = read_dependencies(tmp_path)
    (problem,) = deps.invalid
    assert problem.location == "pyproject.toml:6"
    assert problem.text == "pyopenssl>>1"
    assert problem.why.startswith("not a valid requirement (Expected")
    assert "pyopenssl" not in " ".join(deps.requirements)


def test_the_grader_pins_its_own_tools_whatever_the_submission_asks(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("pytest<8\npytest-socket>=0.7\niniconfig\n")
    deps = read_dependencies(tmp_path)
    tools = grader_tools()
    assert set(tools) >= {"pytest", "pytest-socket"}
    assert deps.tools == tools
    assert deps.requirements == sorted(["iniconfig", *_pins()])
    # The specifier that excluded the pin is reported; the one that admitted it is not.
    assert [(p.location, p.text) for p in deps.overridden] == [("requirements.txt:1", "pytest<8")]
    assert tools["pytest"] in deps.overridden[0].why


def test_links_and_fifos_are_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret-package\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "requirements.txt").symlink_to(outside)
    os.mkfifo(repo / "requirements-dev.txt")
    done: list[object] = []
    reader = threading.Thread(target=lambda: done.append(read_dependencies(repo)), daemon=True)
    reader.start()
    reader.join(timeout=60)  # a generous deadline: a busy machine is slow, not wrong
    assert done, "reading a FIFO named like a requirements file blocked"
    assert done[0].requirements == sorted(_pins())


def test_poetry_groups_and_extras_are_read_with_their_version_syntax(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.poetry]\n"
        'name = "poetic"\n'
        "[tool.poetry.dependencies]\n"
        'python = "^3.10"\n'
        'httpx = "^0.27.2"\n'
        'requests = {version = "~2.31", extras = ["socks"]}\n'
        'mine = {git = "https://example.invalid/mine.git"}\n'
        'lint-only = {version = "*", optional = true}\n'
        "[tool.poetry.group.dev.dependencies]\n"
        'tomli-w = "1.0.0"\n'
        "[tool.poetry.group.docs.dependencies]\n"
        'sphinx = "*"\n'
    )
    deps = read_dependencies(tmp_path)
    assert deps.requirements == sorted(
        ["httpx<0.28,>=0.27.2", "requests[socks]<2.32,>=2.31", "tomli-w==1.0.0", *_pins()]
    )
    assert _refused(deps) == {"pyproject.toml:7": "mine = {'git': 'https://example.invalid/mine.git'}"}
    assert deps.sources == ["pyproject.toml [tool.poetry.dependencies], [tool.poetry.group.dev.dependencies]"]


def test_a_lockfile_pins_index_packages_but_not_the_grader_tools_or_the_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "uvp"\ndependencies = ["tomli-w"]\n')
    index = 'source = { registry = "https://pypi.org/simple" }'
    locked = [("uvp", "0.1.0", 'source = { virtual = "." }'), ("tomli-w", "1.0.0", index)]
    locked += [("pytest", "8.0.0", index), ("pluggy", "1.0.0", index)]
    locked += [("mine", "1.0", 'source = { git = "https://example.invalid/x" }')]
    locked += [("numpy", "1.26.4", index), ("numpy", "2.1.0", index)]
    (tmp_path / "uv.lock").write_text(
        "version = 1\n"
        + "".join(f'[[package]]\nname = "{n}"\nversion = "{v}"\n{src}\n' for n, v, src in locked)
    )
    deps = read_dependencies(tmp_path)
    # numpy is locked at two versions (a split by Python version): left to the resolver.
    assert deps.constraints == ["tomli-w==1.0.0"]
    assert deps.lockfile == "uv.lock"
    assert deps.described() == (
        "1 requirement from pyproject.toml [project] dependencies, pinned by uv.lock (1 locked version)"
    )


def test_a_malformed_lockfile_is_refused_not_trusted(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("tomli-w\n")
    (tmp_path / "poetry.lock").write_text("[[package]\nname = \n")
    deps = read_dependencies(tmp_path)
    assert deps.constraints == [] and deps.lockfile is None
    assert [p.location for p in deps.refused] == ["poetry.lock"]


def test_extras_groups_and_files_the_readme_makefile_or_ci_install_are_installed(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["httpx"]\n'
        '[project.optional-dependencies]\nci = ["respx"]\ndocs = ["sphinx"]\ntest = ["anyio"]\n'
        '[dependency-groups]\nlint_tools = ["ruff"]\n'
    )
    (tmp_path / "README.md").write_text("Install:\n\n    pip install -e '.[CI]'\n\nPlain prose: .[docs]\n")
    (tmp_path / "Makefile").write_text("install:\n\tpip install -r requirements/dev.txt\n")
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "dev.txt").write_text("iniconfig\n")
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "test.yml").write_text("      - run: uv sync --group lint-tools\n")
    deps = read_dependencies(tmp_path)
    assert deps.requirements == sorted(["anyio", "httpx", "iniconfig", "respx", "ruff", *_pins()])
    assert deps.sources == [
        "pyproject.toml [project] dependencies",
        "extras test, ci (named at README.md:3)",
        "dependency groups lint_tools (named at .github/workflows/test.yml:1)",
        "requirements/dev.txt (named at Makefile:2)",
    ]


def test_workflows_behind_a_link_out_of_the_repository_are_not_read(tmp_path: Path) -> None:
    outside, repo = tmp_path / "outside", tmp_path / "repo"
    (outside / "workflows").mkdir(parents=True)
    (outside / "workflows" / "ci.yml").write_text("      - run: pip install -e '.[ci]'\n")
    repo.mkdir()
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = []\n[project.optional-dependencies]\nci = ["respx"]\n'
    )
    (repo / ".github").symlink_to(outside)
    assert read_dependencies(repo).requirements == sorted(_pins())
