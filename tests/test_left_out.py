"""Tests the suite's command leaves out (issue 14, red-team F10: a `make test` naming only the passing test
files raised a failing suite from 43 to 47 of 54).

Each case is a real submission graded by the real `grader.grading.grade`: the grader runs every test the
repository holds when the command names files or ids or ignores some, and a left-out test that fails is a
hidden failure; the controls are the same repository whose `make test` runs everything (an honest red run),
a command narrowed to a folder holding every test, and options (`-m`, recipe variables) the whole-suite run
keeps so that an honest subset is not punished.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.manifest import suite_command

GOOD = """
def test_one():
    assert 1 + 1 == 2


def test_two():
    assert "a" in "abc"
"""

BAD = """
import pytest


@pytest.mark.parametrize("i", range(3))
def test_label(i):
    assert i < 0, "wrong label"
"""

# Passes only with the recipe's own variable, as a replay mode switch does.
NEEDS_MODE = """
import os


def test_mode():
    assert os.environ.get("TRIAGE_MODE") == "replay"
"""

LIVE = """
import socket

import pytest


@pytest.mark.live
def test_live_endpoint():
    socket.create_connection(("example.com", 443), timeout=2).close()
"""


def _grade(repo: Path, cache: Path) -> dict:
    from grader.grading import grade
    from grader.rubric import load_rubric

    return grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=cache, jobs=1)


def _row(report: dict) -> dict:
    return next(row for row in report["rows"] if row["id"] == "offline-replay")


@pytest.mark.slow
def test_a_make_test_naming_only_the_passing_files_is_caught(make_submission, grade_cache) -> None:
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_bad.py": BAD,
        "Makefile": "test:\n\tpython -m pytest -q tests/test_good.py\n",
    }
    report = _grade(make_submission(files), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["passed"] == 2 and facts["failed"] == 0, facts
    assert facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1, row
    assert "3 tests left out of the suite's command fail when run" in row["evidence"], row["evidence"]
    assert "Makefile:2" in row["evidence"] and "names test files or ids" in row["evidence"]
    details = " ".join(row.get("details", []))
    assert "left out and failing: tests/test_bad.py::test_label[0] (" in details, details
    make = next(row for row in report["rows"] if row["id"] == "make-targets")
    assert make["score"] < 3, make  # "the tests pass" is the grader's verdict, not make's exit status


# Red team 4, F8: a prerequisite "tidies" the tree, failing tests included, before pytest runs what is left;
# F8b: it rewrites them instead (the same ids run, but not the tests submitted: assertions made always true).
_TIDY_FIRST = "test: tidy\n\tpython -m pytest -q\n\ntidy:\n\tpython tools/tidy.py\n"
_DELETE = "import shutil\nshutil.rmtree('tests/edge', ignore_errors=True)\n"
_REWRITE = (
    "from pathlib import Path\n"
    "p = Path('tests/edge/test_bad.py')\n"
    "p.write_text(p.read_text().replace('assert ', 'assert True or '))\n"
)
# F8c: no prerequisite; the package a conftest imports rewrites the test as it loads, in every run of the
# suite, the rerun's included: there the test file is shown read-only, as submitted.
_SNEAKY = (
    "from pathlib import Path\n"
    "p = Path(__file__).parent / 'tests' / 'edge' / 'test_bad.py'\n"
    "try:\n"
    "    p.write_text(p.read_text().replace('assert i', 'assert True or i'))\n"
    "except OSError:\n"
    "    pass\n"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        {"tools/tidy.py": _DELETE, "Makefile": _TIDY_FIRST},
        {"tools/tidy.py": _REWRITE, "Makefile": _TIDY_FIRST},
        {
            "tests/conftest.py": "import sneaky  # noqa: F401\n",
            "sneaky.py": _SNEAKY,
            "Makefile": "test:\n\tpython -m pytest -q\n",
        },
    ],
    ids=["deletes", "rewrites", "rewrites-on-import"],
)
def test_a_suite_that_tidies_failing_tests_away_as_it_runs_is_caught(
    make_submission, grade_cache, extra: dict[str, str]
) -> None:
    files = {"tests/test_good.py": GOOD, "tests/edge/test_bad.py": BAD, **extra}
    report = _grade(make_submission(files), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1, row
    evidence = row["evidence"]
    assert "deleted or rewrote its own test files (tests/edge/test_bad.py)" in evidence, evidence


@pytest.mark.slow
def test_the_same_repository_running_everything_is_an_honest_red_run(make_submission, grade_cache) -> None:
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_bad.py": BAD,
        "Makefile": "test:\n\tpython -m pytest -q\n",
    }
    report = _grade(make_submission(files), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 3 and facts["hidden_failures"] == 0, facts
    assert "left out" not in _row(report)["evidence"]


@pytest.mark.slow
def test_an_ignore_option_and_a_node_id_are_caught_too(make_submission, grade_cache) -> None:
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_bad.py": BAD,
        "Makefile": "test:\n\tpython -m pytest -q --ignore=tests/test_bad.py tests/test_good.py::test_one\n",
    }
    report = _grade(make_submission(files), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["passed"] == 1 and facts["hidden_failures"] == 3, facts
    # test_two was left out too, and passes: only failures count.
    assert "test_two" not in " ".join(_row(report).get("details", []))


@pytest.mark.slow
def test_an_honest_subset_keeps_its_variables_and_its_live_tests_do_not_count(
    make_submission, grade_cache
) -> None:
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_mode.py": NEEDS_MODE,
        "tests/test_live.py": LIVE,
        "Makefile": 'test:\n\tTRIAGE_MODE=replay python -m pytest -q -m "not live" tests/test_good.py\n',
    }
    pyproject = (
        '[project]\nname = "submission"\nversion = "0.1.0"\n\n'
        '[tool.pytest.ini_options]\nmarkers = ["live: needs the network"]\n'
    )
    report = _grade(make_submission(files, pyproject=pyproject), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["passed"] == 2 and facts["hidden_failures"] == 0, (facts, _row(report)["evidence"])
    assert "left out" not in _row(report)["evidence"], _row(report)


# --- which commands may leave tests out (read statically, nothing run) ------------------------------------


def _narrowed(tmp_path: Path, recipe: str, tests: tuple[str, ...] = ("tests/test_a.py",)):
    for rel in tests:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("def test_x():\n    pass\n", encoding="utf-8")
    (tmp_path / "Makefile").write_text(f"test:\n\t{recipe}\n", encoding="utf-8")
    return suite_command(tmp_path).narrowed


def test_the_whole_suite_or_the_folder_holding_it_leaves_nothing_out(tmp_path: Path) -> None:
    assert _narrowed(tmp_path, "python -m pytest -q") is None
    assert _narrowed(tmp_path, "MODE=replay $(PY) -m pytest -q tests") is None
    assert _narrowed(tmp_path, "pytest -x -q --record-mode=none tests/") is None


def test_a_test_file_outside_the_named_folder_is_left_out(tmp_path: Path) -> None:
    narrowed = _narrowed(tmp_path, "pytest tests", tests=("tests/test_a.py", "test_root.py"))
    assert narrowed is not None and "leaves out test_root.py" in narrowed.why


@pytest.mark.parametrize(
    ("recipe", "why"),
    [
        ("pytest tests/test_a.py", "names test files or ids"),
        ("pytest tests/test_a.py::test_x", "names test files or ids"),
        ("pytest --deselect tests/test_a.py::test_x", "--deselect tests/test_a.py::test_x"),
        ("pytest --ignore-glob='*_slow.py'", "--ignore-glob=*_slow.py"),
        ("pytest $(TESTS)", "not plain words"),
        ("pytest -m 'not live' tests", "-m not live"),
        ("pytest -k 'not edge_case'", "-k not edge_case"),
    ],
)
def test_commands_that_may_leave_tests_out(tmp_path: Path, recipe: str, why: str) -> None:
    narrowed = _narrowed(tmp_path, recipe)
    assert narrowed is not None and why in narrowed.why and narrowed.why.startswith("Makefile:2: ")


def test_the_whole_suite_run_keeps_options_and_plain_variables_only(tmp_path: Path) -> None:
    recipe = "LD_PRELOAD=/x.so TRIAGE_MODE=replay PYTHONPATH=. pytest -q -m 'not live' -p x tests/test_a.py"
    narrowed = _narrowed(tmp_path, recipe)
    assert narrowed is not None
    assert narrowed.args == ["-q", "-p", "x"]  # -m is dropped like the paths: its tests run too
    assert narrowed.env == {"TRIAGE_MODE": "replay"}


# --- the pytest configuration narrows the suite (red-team R12) -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "ini",
    [
        "addopts = \"-ra -k 'not test_label'\"",
        'python_functions = ["test_o*", "test_t*"]',
    ],
)
def test_a_configuration_that_hides_failing_tests_is_caught(make_submission, grade_cache, ini: str) -> None:
    pyproject = f'[project]\nname = "submission"\nversion = "0.1.0"\n\n[tool.pytest.ini_options]\n{ini}\n'
    files = {"tests/test_good.py": GOOD, "tests/test_bad.py": BAD}
    report = _grade(make_submission(files, pyproject=pyproject), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1 and "the pytest configuration selects tests" in row["evidence"], row


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "text"),
    [
        (".pytest.ini", "[pytest]\naddopts = -ra --ignore=tests/edge\n"),
        ("pyproject.toml", '[tool.pytest.ini_options]\nnorecursedirs = ["edge", ".*", "build", "dist"]\n'),
        ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "-ra -o python_files=test_good.py"\n'),
        # pytest 9's native TOML (red team 4, F6b)
        ("pytest.toml", '[pytest]\naddopts = ["-ra", "--ignore=tests/edge"]\n'),
        (".pytest.toml", '[pytest]\nnorecursedirs = ["edge"]\n'),
        ("pyproject.toml", '[tool.pytest]\naddopts = ["-ra", "--ignore=tests/edge"]\n'),
    ],
)
def test_failing_tests_left_out_by_a_hidden_ini_or_norecursedirs_are_caught(
    make_submission, grade_cache, config: str, text: str
) -> None:
    # Red team 4, F6: pytest reads .pytest.ini first, and norecursedirs keeps it out of a folder.
    pyproject = '[project]\nname = "submission"\nversion = "0.1.0"\n'
    files = {"tests/test_good.py": GOOD, "tests/edge/test_bad.py": BAD}
    if config != "pyproject.toml":
        files[config] = text
    else:
        pyproject += "\n" + text
    report = _grade(make_submission(files, pyproject=pyproject), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1 and "the pytest configuration selects tests" in row["evidence"], row


def test_configuration_that_selects_nothing_leaves_nothing_out(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "-ra --record-mode=none"\ntestpaths = ["tests"]\n'
    )
    assert _narrowed(tmp_path, "pytest") is None
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -m 'not live'\n")
    narrowed = _narrowed(tmp_path, "pytest")
    assert narrowed is not None and "pytest.ini: addopts = -m 'not live'" in narrowed.why
    assert narrowed.args[:2] == ["-o", "addopts="]
    for glued in ("-knot_currency", "-qmlive", "-opython_functions=test_[!p]*"):
        (tmp_path / "pytest.ini").write_text(f"[pytest]\naddopts = -ra {glued}\n")
        narrowed = _narrowed(tmp_path, "pytest")
        assert narrowed is not None and f"pytest.ini: addopts = -ra {glued}" in narrowed.why, glued


# --- red team 5, G5: deselection the grader cannot read from the recipe line or the usual files ----------

_DESELECT = " ".join(f"--deselect=tests/test_bad.py::test_label[{i}]" for i in range(3))


@pytest.mark.parametrize(
    ("recipe", "why"),
    [
        ("pytest @.pytest-args", "@.pytest-args, arguments read from a file"),
        ("pytest -c ci/pytest.ini --rootdir=.", "-c ci/pytest.ini, a configuration file of its own"),
        ("pytest --config-file=ci/pytest.ini", "--config-file=ci/pytest.ini, a configuration file"),
        ("pytest -o python_functions=test_good*", "-o python_functions=test_good*"),
        ("pytest --override-ini=norecursedirs=edge", "--override-ini=norecursedirs=edge"),
        # Red team 31: glued to its value, or last of a run of short options.
        ("pytest -o'python_functions=test_[!p]*'", "-o python_functions=test_[!p]*"),
        ("pytest -qopython_files=test_[!r]*.py", "-o python_files=test_[!r]*.py"),
        ("pytest -knot_currency", "-k not_currency"),
    ],
)
def test_arguments_from_a_file_or_a_configuration_of_its_own_leave_tests_out(
    tmp_path: Path, recipe: str, why: str
) -> None:
    narrowed = _narrowed(tmp_path, recipe)
    assert narrowed is not None and why in narrowed.why, narrowed
    assert not any(arg.startswith("@") for arg in narrowed.args)  # the file's arguments are not read again
    if "ci/pytest.ini" in recipe:  # its settings kept, its addopts overridden
        assert narrowed.args[:2] == ["-o", "addopts="]
        assert any(arg.endswith("ci/pytest.ini") for arg in narrowed.args)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("files", "recipe"),
    [
        ({".pytest-args": _DESELECT.replace(" ", "\n") + "\n"}, "python -m pytest -q @.pytest-args"),
        ({"ci/pytest.ini": f"[pytest]\naddopts = -ra {_DESELECT}\n"}, "python -m pytest -q -c ci/pytest.ini"),
    ],
    ids=["argsfile", "own-config"],
)
def test_failing_tests_deselected_through_an_argsfile_or_an_own_config_are_caught(
    make_submission, grade_cache, files: dict[str, str], recipe: str
) -> None:
    report = _grade(
        make_submission(
            {
                "tests/test_good.py": GOOD,
                "tests/test_bad.py": BAD,
                "Makefile": f"test:\n\t{recipe}\n",
                **files,
            }
        ),
        grade_cache,
    )
    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["deselected"] == 3 and facts["hidden_failures"] == 3, facts
    assert _row(report)["score"] <= 1, _row(report)


@pytest.mark.slow
def test_tests_deselected_by_a_plugin_the_grader_cannot_read_are_run(make_submission, grade_cache) -> None:
    """The guard counted deselected tests and nothing on the recipe line or in the configuration says why
    (a plugin module of the repository's, loaded with `-p`): every test runs once more."""
    plugin = (
        "def pytest_collection_modifyitems(config, items):\n"
        "    bad = [i for i in items if 'test_label' in i.nodeid]\n"
        "    items[:] = [i for i in items if i not in bad]\n"
        "    config.hook.pytest_deselected(items=bad)\n"
    )
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_bad.py": BAD,
        "quiet.py": plugin,
        "Makefile": "test:\n\tpython -m pytest -q -p quiet\n",
    }
    report = _grade(make_submission(files), grade_cache)
    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1 and "3 tests were deselected in the suite's run" in row["evidence"], row


@pytest.mark.slow
@pytest.mark.parametrize(
    "configure",
    [
        "    config.option.ignore = [*(config.option.ignore or []), 'tests/test_bad.py']\n",
        "    config.args[:] = ['tests/test_good.py']\n",
    ],
    ids=["ignore-option", "args-rewritten"],
)
def test_a_conftest_that_narrows_collection_at_configure_time_is_undone(
    make_submission, grade_cache, configure: str
) -> None:
    """Red team 15: a conftest's `pytest_configure` put the failing file in `config.option.ignore` (or
    rewrote `config.args`): never collected, neither skipped nor deselected, and scored as a green suite."""
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_bad.py": BAD,
        "tests/conftest.py": "def pytest_configure(config):\n" + configure,
        "Makefile": "test:\n\tpython -m pytest -q\n",
    }
    report = _grade(make_submission(files), grade_cache)
    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1 and "changed what pytest was asked to collect" in row["evidence"], row


# Red team 20, F2: make runs another recipe than the Makefile's own `test:` text says: an included file
# redefines it, a second rule overrides it, or variables set for `test` alone change what it runs.
_INDIRECT = {
    "include": ("test:\n\tpython -m pytest -q\n\ninclude tests/suite.mk\n", "tests/suite.mk"),
    "second rule": ("test:\n\tpython -m pytest -q\n\ntest:\n\tpython -m pytest -q tests/test_good.py\n", ""),
    "variable": (
        "PYTHON = python\ntest: PYTHON := python tools/subset.py\ntest:\n\t$(PYTHON) -m pytest -q\n",
        "",
    ),
}
_SUBSET_MK = "test:\n\tpython -m pytest -q tests/test_good.py\n"
_SUBSET_PY = "import sys\n\nimport pytest\n\nsys.exit(pytest.main(['-q', 'tests/test_good.py']))\n"


@pytest.mark.parametrize("kind", sorted(_INDIRECT))
def test_a_makefile_that_can_run_another_test_recipe_gets_every_test_run(tmp_path: Path, kind: str) -> None:
    makefile, _ = _INDIRECT[kind]
    (tmp_path / "Makefile").write_text(makefile, encoding="utf-8")
    narrowed = suite_command(tmp_path).narrowed
    assert narrowed is not None and "Makefile:" in narrowed.why, narrowed


def test_prerequisites_and_plain_variables_are_no_indirection(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text(
        "PY := python\ntest: lint ## run the suite\n\t$(PY) -m pytest -q\n\nlint:\n\truff check .\n",
        encoding="utf-8",
    )
    assert suite_command(tmp_path).narrowed is None


@pytest.mark.slow
def test_a_test_recipe_redefined_in_an_included_file_is_caught(make_submission, grade_cache) -> None:
    makefile, included = _INDIRECT["include"]
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_bad.py": BAD,
        "Makefile": makefile,
        included: _SUBSET_MK,
        "tools/subset.py": _SUBSET_PY,
    }
    report = _grade(make_submission(files), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["passed"] == 2 and facts["failed"] == 0, facts  # make ran the included recipe
    assert facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1 and "include tests/suite.mk" in row["evidence"], row


# Red team 20, F1: a failing test deleted, rebound or redefined under its name before pytest collects it.
HIDDEN = """
import pytest


def test_deleted():
    assert False, "deleted"


del test_deleted


def test_redefined():
    assert False, "first definition"


def test_redefined():
    assert True


class TestRebound:
    def test_rebound(self):
        assert False, "rebound"

    test_rebound = None


def test_wrapped():
    assert True


test_wrapped = pytest.mark.slow(test_wrapped)
"""


@pytest.mark.slow
def test_tests_deleted_or_redefined_before_collection_are_run_and_count(make_submission, grade_cache) -> None:
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_hidden.py": HIDDEN,
        "Makefile": "test:\n\tpython -m pytest -q\n",
    }
    report = _grade(make_submission(files), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["passed"] == 4 and facts["failed"] == 0, facts  # pytest saw neither hidden test
    assert facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1, row
    assert "delete or redefine tests" in row["evidence"] and "tests/test_hidden.py:" in row["evidence"], row


@pytest.mark.slow
def test_a_wrapped_or_distinct_test_is_no_hidden_test(make_submission, grade_cache) -> None:
    """The control: a rebinding that wraps the test, and a helper deleted, leave the suite as it ran."""
    wrapped = "import pytest\n\n\ndef test_w():\n    assert True\n\n\ntest_w = pytest.mark.slow(test_w)\n"
    helper = (
        "def helper():\n    return 1\n\n\nVALUE = helper()\ndel helper\n\n\ndef test_v():\n    assert VALUE\n"
    )
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_wrapped.py": wrapped,
        "tests/test_helper.py": helper,
        "Makefile": "test:\n\tpython -m pytest -q\n",
    }
    report = _grade(make_submission(files), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["passed"] == 4 and facts["failed"] == 0 and facts["hidden_failures"] == 0, facts
    assert "delete or redefine" not in _row(report)["evidence"]


# Red team 22, F1: the Makefile changes what runs the recipe line: make's shell, its flags, bash's start-up
# file, the PATH its `python` is found on. The line read says `python -m pytest`; what ran left a file out.
_RECIPE_ENVIRONMENTS = {
    "SHELL": "SHELL := tools/sh\n",
    ".SHELLFLAGS": ".SHELLFLAGS := --rcfile tools/bashrc -ic\n",
    "BASH_ENV": "export BASH_ENV := tools/shell.env\n",
    "PATH": "export PATH := $(CURDIR)/tools/bin:$(PATH)\n",
    # make's own flags: GNU make obeys `-i` (or `-n`) set there for the recipe read here.
    "MAKEFLAGS": "MAKEFLAGS += -i\n",
    "MAKEFILES": "export MAKEFILES := tools/rules.mk\n",
    ".RECIPEPREFIX": ".RECIPEPREFIX := >\n",
}


@pytest.mark.parametrize("name", sorted(_RECIPE_ENVIRONMENTS))
def test_a_makefile_changing_what_runs_its_recipe_gets_every_test_run(tmp_path: Path, name: str) -> None:
    (tmp_path / "Makefile").write_text(
        _RECIPE_ENVIRONMENTS[name] + "test:\n\tpython -m pytest -q\n", encoding="utf-8"
    )
    narrowed = suite_command(tmp_path).narrowed
    assert narrowed is not None and f"({name})" in narrowed.why and "Makefile:" in narrowed.why, narrowed


@pytest.mark.parametrize(
    "line",
    [
        "$(eval test: ; python -m pytest -q --ignore=tests/test_bad.py)\n",
        "RULE = test: ; python -m pytest -q\n${eval ${RULE}}\n",
    ],
)
def test_a_makefile_defining_rules_with_eval_gets_every_test_run(tmp_path: Path, line: str) -> None:
    (tmp_path / "Makefile").write_text("test:\n\tpython -m pytest -q\n\n" + line, encoding="utf-8")
    narrowed = suite_command(tmp_path).narrowed
    assert narrowed is not None and "`eval`" in narrowed.why and "Makefile:" in narrowed.why, narrowed


def test_a_plain_makefile_runs_its_own_recipe_as_read(tmp_path: Path) -> None:
    """The control: variables of its own, a PATH read but not set, an `export` of another name."""
    (tmp_path / "Makefile").write_text(
        "PYTHON ?= python\nexport CASSETTE_MODE = replay\nEVALUATE = yes\n\n"
        "test:\n\t$(PYTHON) -m pytest -q  # $(PATH)\n",
        encoding="utf-8",
    )
    assert suite_command(tmp_path).narrowed is None


_SHELL_ENV = """\
python() {
    case "$*" in
        "-m pytest"*) command python "$@" --ignore=tests/test_bad.py ;;
        *) command python "$@" ;;
    esac
}
"""


@pytest.mark.slow
def test_a_file_dropped_by_bashs_start_up_file_is_a_hidden_failure(make_submission, grade_cache) -> None:
    files = {
        "tests/test_good.py": GOOD,
        "tests/test_bad.py": BAD,
        "tools/shell.env": _SHELL_ENV,
        "Makefile": (
            "SHELL := /bin/bash\nexport BASH_ENV := tools/shell.env\n\ntest:\n\tpython -m pytest -q\n"
        ),
    }
    report = _grade(make_submission(files), grade_cache)

    facts = report["facts"]["replay"]
    assert facts["passed"] == 2 and facts["failed"] == 0, facts  # bash's function left the failing file out
    assert facts["hidden_failures"] == 3, facts
    row = _row(report)
    assert row["score"] <= 1 and "changes what runs the recipe (SHELL)" in row["evidence"], row
