"""grader.manifest: [tool.takehome] reading, discovery fallback, malformed input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.manifest import read_manifest


def _write(root: Path, rel: str, text: str = "") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_declared_manifest_is_read(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "pyproject.toml",
        """
[project]
name = "triage"
[tool.takehome]
cassette_dir = "tapes"
triage_command = ["python", "-m", "triage"]
key_function = "triage.cassette:key_for"
record_command = ["make", "record"]
api_key_env = "ANTHROPIC_API_KEY"
base_url_env = "ANTHROPIC_BASE_URL"
""",
    )
    (tmp_path / "tapes").mkdir()
    (tmp_path / "cassettes").mkdir()  # a declared folder wins over discovery

    m = read_manifest(tmp_path)

    assert m.declared
    assert m.cassette_dir == Path("tapes")
    assert m.cassette_dir_source == "declared"
    assert m.triage_command == ["python", "-m", "triage"]
    assert m.key_function == "triage.cassette:key_for"
    assert m.record_command == ["make", "record"]
    assert m.api_key_env == "ANTHROPIC_API_KEY"
    assert m.base_url_env == "ANTHROPIC_BASE_URL"
    assert m.notes == ()


def test_no_manifest_falls_back_to_vcr_layout(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n')
    _write(tmp_path, "tests/cassettes/test_triage/test_one.yaml", "interactions: []\n")

    m = read_manifest(tmp_path)

    assert not m.declared
    assert m.cassette_dir == Path("tests/cassettes")
    assert m.cassette_dir_source == "discovered"
    assert m.triage_command is None and m.key_function is None
    assert any("no [tool.takehome]" in note for note in m.notes)


def test_malformed_toml_is_a_note_not_a_crash(tmp_path: Path) -> None:
    _write(tmp_path, "pyproject.toml", "[tool.takehome\ncassette_dir = \n")
    (tmp_path / "cassettes").mkdir()

    m = read_manifest(tmp_path)

    assert not m.declared
    assert m.cassette_dir == Path("cassettes")
    assert len(m.notes) == 1 and "not valid TOML" in m.notes[0]


def test_wrong_types_are_ignored_with_notes(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "pyproject.toml",
        '[tool.takehome]\ntriage_command = "python -m x"\napi_key_env = 3\n'
        'cassette_dir = "../outside"\nnew = 1\n',
    )

    m = read_manifest(tmp_path)

    assert m.declared
    assert m.triage_command is None and m.api_key_env is None and m.cassette_dir is None
    joined = "\n".join(m.notes)
    assert "triage_command must be a non-empty list" in joined
    assert "api_key_env must be a non-empty string" in joined
    assert "'../outside' is not a folder inside the repo" in joined
    assert "unknown [tool.takehome] key 'new'" in joined


def test_cassette_dir_symlink_out_of_repo_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    os.symlink(outside, repo / "cassettes")

    assert read_manifest(repo).cassette_dir is None


def test_nested_cassettes_folder_is_discovered(tmp_path: Path) -> None:
    _write(tmp_path, "src/triage/cassettes/abc.json", "{}")
    _write(tmp_path, ".venv/lib/cassettes/x.json", "{}")

    assert read_manifest(tmp_path).cassette_dir == Path("src/triage/cassettes")


def test_default_model_from_cookiecutter_then_source(tmp_path: Path) -> None:
    source = 'import os\nDEFAULT_MODEL = os.environ.get("MODEL", "gpt-4o-mini")\n'
    _write(tmp_path, "triage/config.py", source)
    _write(tmp_path, "tests/test_x.py", 'DEFAULT_MODEL = "test-only"\n')
    assert read_manifest(tmp_path).default_model == "gpt-4o-mini"

    _write(tmp_path, ".cookiecutter.json", '{"default_model": "claude-3-5-haiku-latest"}')
    assert read_manifest(tmp_path).default_model == "claude-3-5-haiku-latest"


def test_default_model_ignores_unparseable_source(tmp_path: Path) -> None:
    _write(tmp_path, "broken.py", "def (:\n")
    assert read_manifest(tmp_path).default_model is None


def test_other_cassette_folders_are_named_in_a_note(tmp_path: Path) -> None:
    # Discovery grades one folder: a reviewer is told which, and which others hold files.
    _write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n')
    _write(tmp_path, "cassettes/abc.json", "{}")
    _write(tmp_path, "tests/cassettes/test_triage/test_one.yaml", "interactions: []\n")
    (tmp_path / "fixtures" / "cassettes").mkdir(parents=True)  # empty: not worth a word

    m = read_manifest(tmp_path)

    assert m.cassette_dir == Path("cassettes")
    notes = [n for n in m.notes if n.startswith("cassette folders found")]
    assert notes == [
        "cassette folders found: cassettes, tests/cassettes; graded as tapes: cassettes only "
        "(declare [tool.takehome] cassette_dir to choose another)"
    ]
    _write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n[tool.takehome]\ncassette_dir = "cassettes"\n')
    assert not [n for n in read_manifest(tmp_path).notes if n.startswith("cassette folders found")]


# --- how the suite is run: the Makefile's test target, else the README, never an environment maker -------


def _suite(tmp_path: Path, files: dict[str, str]):
    from grader.manifest import suite_command

    for rel, text in files.items():
        (tmp_path / rel).write_text(text, encoding="utf-8")
    return suite_command(tmp_path)


def test_a_make_test_that_runs_the_suite_is_used_as_it_is(tmp_path: Path) -> None:
    suite = _suite(
        tmp_path, {"Makefile": "PY ?= python\n\ntest: ## offline\n\tCASSETTE_MODE=replay $(PY) -m pytest\n"}
    )
    assert suite.argv == ["make", "test"]
    assert suite.how == "make test (Makefile:3)"


def test_a_make_test_that_makes_an_environment_runs_its_pytest_with_the_installed_interpreter(
    tmp_path: Path,
) -> None:
    suite = _suite(tmp_path, {"Makefile": "test:\n\t@uv run --frozen pytest -q tests/\n"})
    assert suite.argv == ["python", "-m", "pytest", "-q", "tests/"]
    assert suite.how == (
        "Makefile:1: `make test` runs `uv run --frozen pytest -q tests/`, which makes an environment over "
        "the network; ran `python -m pytest -q tests/` with the installed interpreter instead"
    )


@pytest.mark.parametrize(
    "recipe",
    [
        "poetry run pytest",
        "tox -e py311",
        "hatch test",
        ".venv/bin/pytest",
        "python -m pip install -e . && python -m pytest",
    ],
)
def test_each_environment_maker_is_recognised(tmp_path: Path, recipe: str) -> None:
    suite = _suite(tmp_path, {"Makefile": f"test:\n\t{recipe}\n"})
    assert suite.argv == ["python", "-m", "pytest"]
    assert f"runs `{recipe}`" in suite.how


def test_a_prerequisite_that_syncs_an_environment_counts_too(tmp_path: Path) -> None:
    makefile = "install:\n\tuv sync --all-extras\n\ntest: install\n\tpytest -x\n"
    suite = _suite(tmp_path, {"Makefile": makefile})
    assert suite.argv == ["python", "-m", "pytest", "-x"]
    assert "runs `uv sync --all-extras`" in suite.how


def test_make_variables_in_pytest_arguments_are_not_guessed(tmp_path: Path) -> None:
    suite = _suite(tmp_path, {"Makefile": "test:\n\tuv run pytest $(ARGS) -q\n"})
    assert suite.argv == ["python", "-m", "pytest"]


def test_without_a_test_target_the_readmes_command_is_used_not_prose_or_recording(tmp_path: Path) -> None:
    readme = (
        "# x\n\npytest is what we use for tests.\n\nTo record:\n\n```bash\n"
        'OPENAI_API_KEY="$(llm keys get openai)" pytest --record-mode=rewrite\n```\n'
        "Run them:\n\n```bash\ncd x\nuv run pytest -q\n```\n"
    )
    suite = _suite(tmp_path, {"README.md": readme, "Makefile": "lint:\n\truff check .\n"})
    assert suite.argv == ["python", "-m", "pytest", "-q"]
    assert suite.how.startswith("README.md:14: the README runs `uv run pytest -q`, which makes an")


def test_without_makefile_or_readme_command_the_suite_is_python_m_pytest(tmp_path: Path) -> None:
    suite = _suite(tmp_path, {"README.md": "# nothing to run here\n"})
    assert suite.argv == ["python", "-m", "pytest"]


def _package(root: Path, rel: str, main: bool = True) -> None:
    _write(root, f"{rel}/__init__.py")
    if main:
        _write(root, f"{rel}/__main__.py", "print('hi')\n")


def test_a_src_layout_package_with_main_is_the_triage_command(tmp_path: Path) -> None:
    # The brief's `python -m <pkg>` works there too: every run puts src/ on the path.
    _write(tmp_path, "pyproject.toml", '[project]\nname = "helpdesk"\n')
    _package(tmp_path, "src/helpdesk_triage")
    _package(tmp_path, "src/helpers", main=False)
    assert read_manifest(tmp_path).triage_command == ["python", "-m", "helpdesk_triage"]


def test_two_packages_with_main_at_root_and_in_src_leave_the_command_undiscovered(tmp_path: Path) -> None:
    _package(tmp_path, "triage")
    _package(tmp_path, "src/other")
    assert read_manifest(tmp_path).triage_command is None


def test_a_src_folder_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    _package(elsewhere, "stolen")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "src").symlink_to(elsewhere)
    assert read_manifest(repo).triage_command is None
