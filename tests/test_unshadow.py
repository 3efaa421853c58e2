"""Bringing back tests a module hides before collection (grader/unshadow.py; red team 20, F1), in a copy."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from grader import unshadow

SOURCE = (
    "def test_a():\n"  # 1
    "    assert False\n"  # 2
    "x = 1; del test_a\n"  # 3: a del after another statement on the line
    "def test_b(): pass\n"  # 4
    "def test_b(): pass\n"  # 5
    "class TestK:\n"  # 6
    "    def test_c(self): pass\n"  # 7
    "    test_c, other = None, 1\n"  # 8: not a plain Name target list: left as is
    "    def test_d(self): pass\n"  # 9
    "    test_d = None\n"  # 10
    "def test_e(): pass\n"  # 11
    "test_e = wrap(test_e)\n"  # 12: a wrapper, left alone
    "def test_f(): pass  # caf\u00e9\n"  # 13
    "del test_f\n"  # 14
    "def test_f(): pass\n"  # 15: after an undone del, a second definition of the first
)


def _tests(text: str) -> set[str]:
    tree = ast.parse(text)
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        names |= {f"{cls.name}.{n.name}" for n in cls.body if isinstance(n, ast.FunctionDef)}
    return names


def test_revive_brings_back_every_hidden_test_and_keeps_line_numbers(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    module = tmp_path / "tests" / "test_m.py"
    module.write_text(SOURCE, encoding="utf-8")

    undone = unshadow.revive(tmp_path, "tests/test_m.py")

    text = module.read_text(encoding="utf-8")
    assert text.count("\n") == SOURCE.count("\n")
    assert {(s.kind, s.line) for s in undone} == {
        ("del", 3),
        ("redefines", 5),
        ("reassigns", 10),
        ("del", 14),
        ("redefines", 15),
    }, undone
    # The rewritten module still imports, as pytest would import it.
    spec = importlib.util.spec_from_file_location("test_m_revived", module)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    loaded.wrap = lambda f: None  # type: ignore[attr-defined]
    spec.loader.exec_module(loaded)
    namespace = vars(loaded)
    alive = {k for k, v in namespace.items() if k.startswith("test_") and callable(v)}
    assert {"test_a", "test_b", "test_b__hidden_L4", "test_f", "test_f__hidden_L13"} <= alive, alive
    assert "test_e" not in alive  # the wrapper is the suite's own business
    klass = namespace["TestK"]
    assert callable(getattr(klass, "test_d", None)), text


def test_a_module_hiding_nothing_is_left_untouched(tmp_path: Path) -> None:
    module = tmp_path / "test_ok.py"
    module.write_text("def helper(): pass\ndel helper\ndef test_x(): pass\n", encoding="utf-8")
    before = module.stat().st_mtime_ns
    assert unshadow.revive(tmp_path, "test_ok.py") == []
    assert module.stat().st_mtime_ns == before


def test_a_link_is_not_rewritten(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text(SOURCE, encoding="utf-8")
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "test_m.py").symlink_to(outside)
    assert unshadow.revive(copy, "test_m.py") == []
    assert outside.read_text(encoding="utf-8") == SOURCE


def test_shadows_lists_in_source_order() -> None:
    found = unshadow.shadows(ast.parse(SOURCE))
    assert [s.line for s in found] == sorted(s.line for s in found)
    assert any(s.wraps and s.name == "test_e" for s in found)


# Red team 25, F3-F5: tests pytest passes over by its own rules. Each hidden test fails; the honest forms
# beside them (a helper class named Test*, parametrize records in a Test* dataclass, a fixture named test_*
# that a test asks for, a property read) must keep working once the copy is revived.
NEVER_COLLECTED = """\
import dataclasses
from dataclasses import dataclass

import pytest


class TestLabels:
    def __init__(self, cases=None):  # 8: "usable from a notebook"
        self.cases = cases

    def test_label(self):
        assert False, "hidden by __init__"


@dataclasses.dataclass  # 15
class TestRouting:
    label: str = "billing"

    def test_route(self):
        assert self.label == "account", "hidden by a dataclass"


@pytest.fixture  # 23
def test_invoice_is_an_account_matter():
    assert False, "hidden as a fixture"


class TestProps:
    @property  # 29
    def test_shape(self):
        assert False, "hidden as a property"


def t\u0435st_look_alike():  # 34
    assert False, "hidden by a Cyrillic e"


class TestServer:  # a helper the tests build
    def __init__(self, port):
        self.port = port

    def test_port(self):
        return self.port


@dataclass
class TestCase:  # parametrize records
    message: str
    label: str

    def test_record(self):
        return self.label


@pytest.fixture
def test_data():
    return {"label": "billing"}


class Reader:
    @property
    def test_value(self):
        return 3


@pytest.mark.parametrize("case", [TestCase("refund me", "refund")])
def test_honest(case, test_data):
    assert TestServer(8080).port == 8080 and Reader().test_value == 3
    assert case.label == "refund" and test_data["label"] == "billing"


class Recorder:
    def __init__(self):
        self.calls = []


class TestInherited(Recorder):  # 77: the constructor one class up
    def test_inherited(self):
        assert False, "hidden by an inherited __init__"


@pytest.fixture(  # 82: a decorator over several lines
    scope="module",
)
def test_multiline_fixture():
    assert False, "hidden by a fixture decorator over lines"


@dataclasses.dataclass(  # 89
    frozen=True,
)
class TestFrozen:
    label: str = "billing"

    def test_frozen(self):
        assert self.label == "account", "hidden by a dataclass decorator over lines"


@pytest.mark.frozen  # a mark named like attrs' decorator: collected as it is
class TestMarked:
    def test_marked(self):
        assert True
"""


def _pytest(folder: Path) -> str:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", "-rA", "."],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout


def test_tests_pytest_passes_over_are_listed_and_collected_in_the_copy(tmp_path: Path) -> None:
    module = tmp_path / "test_hidden.py"
    module.write_text(NEVER_COLLECTED, encoding="utf-8")
    before = _pytest(tmp_path)
    assert "2 passed" in before and "failed" not in before, before  # the suite's own run: all green

    listed = unshadow.shadows(ast.parse(NEVER_COLLECTED))
    assert {(s.kind, s.line, s.wraps) for s in listed} == {
        ("init", 8, False),
        ("dataclass", 15, False),
        ("fixture", 23, False),
        ("property", 29, False),
        ("look-alike", 34, False),
        ("init", 39, True),  # TestServer and TestCase: built by a test, listed and left alone
        ("dataclass", 46, True),
        ("inherits", 77, False),
        ("fixture", 82, False),
        ("dataclass", 89, False),
    }, listed
    undone = unshadow.revive(tmp_path, "test_hidden.py")

    assert module.read_text(encoding="utf-8").count("\n") == NEVER_COLLECTED.count("\n")
    assert {s.kind for s in undone} == {"init", "dataclass", "fixture", "property", "look-alike", "inherits"}
    after = _pytest(tmp_path)
    for name in (
        "test_label",
        "test_route",
        "test_invoice_is_an_account_matter",
        "test_shape",
        "test_inherited",
        "test_multiline_fixture",
        "test_frozen",
    ):
        assert "FAILED test_hidden.py::" in after and f"::{name} " in after, (name, after)
    assert "test_look_alike__look_alike_L34" in after, after
    assert "8 failed" in after and "PASSED test_hidden.py::test_honest" in after, after
    assert "PASSED test_hidden.py::TestMarked::test_marked" in after, after


def test_a_test_module_named_with_look_alike_letters_is_copied_to_its_ascii_name(tmp_path: Path) -> None:
    from grader import tamper

    (tmp_path / "tests").mkdir()
    hidden = tmp_path / "tests" / "t\u0435st_escalation.py"
    hidden.write_text("def test_account():\n    assert False\n", encoding="utf-8")
    assert "no tests ran" in _pytest(tmp_path)

    scan = tamper.scan(tmp_path)
    assert scan.look_alike_files == ["tests/t\u0435st_escalation.py"]
    assert any(h.kind == "collection" and "'test_escalation.py'" in h.why for h in scan.hooks), scan.hooks

    assert unshadow.revive_file_name(tmp_path, "tests/t\u0435st_escalation.py") == "tests/test_escalation.py"
    assert "1 failed" in _pytest(tmp_path)
    assert hidden.exists()  # the original stays as it was


def test_a_test_module_in_a_folder_pytest_skips_is_listed_and_entered_in_the_copy(tmp_path: Path) -> None:
    from grader import tamper

    (tmp_path / "tests" / "build").mkdir(parents=True)
    (tmp_path / "tests" / "build" / "test_regressions.py").write_text(
        "def test_feedback_is_an_intent():\n    assert False\n", encoding="utf-8"
    )
    (tmp_path / "build" / "lib").mkdir(parents=True)  # build output outside testpaths: not a test folder
    (tmp_path / "build" / "lib" / "test_copy.py").write_text("def test_x():\n    pass\n", encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    assert "no tests ran" in _pytest(tmp_path)

    scan = tamper.scan(tmp_path)
    assert scan.unentered == ["tests/build"]
    assert [h.location for h in scan.hooks if h.kind == "collection"] == ["tests/build/test_regressions.py:1"]

    assert unshadow.enter_folder(tmp_path, "tests/build") == "tests/build__entered"
    assert "1 failed" in _pytest(tmp_path)


@pytest.mark.parametrize("testpaths", [True, False])
def test_a_test_module_in_a_dot_folder_of_the_suite_is_listed_and_entered(
    tmp_path: Path, testpaths: bool
) -> None:
    """pytest skips every dot folder: `tests/.slow/` hides a failing test like `tests/build/` does. A dot
    folder outside the suite (CI scripts' tests in `.github/`) is not the suite and is left alone."""
    from grader import tamper

    (tmp_path / "tests" / ".slow").mkdir(parents=True)
    (tmp_path / "tests" / ".slow" / "test_regressions.py").write_text(
        "def test_feedback_is_an_intent():\n    assert False\n", encoding="utf-8"
    )
    (tmp_path / ".github" / "scripts").mkdir(parents=True)
    (tmp_path / ".github" / "scripts" / "test_release.py").write_text("import release\n", encoding="utf-8")
    if testpaths:
        (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    assert "no tests ran" in _pytest(tmp_path)

    scan = tamper.scan(tmp_path)
    assert scan.unentered == ["tests/.slow"]
    assert [h.location for h in scan.hooks if h.kind == "collection"] == ["tests/.slow/test_regressions.py:1"]

    assert unshadow.enter_folder(tmp_path, "tests/.slow") == "tests/slow__entered"
    assert "1 failed" in _pytest(tmp_path)


@pytest.mark.parametrize(
    ("folder", "marker"),
    [("tests/venv", False), ("tests/.venv", False), ("tests/node_modules/pkg", False), ("tests/env", True)],
)
def test_a_test_module_in_a_folder_pytest_takes_for_an_environment_is_listed_and_entered(
    tmp_path: Path, folder: str, marker: bool
) -> None:
    """pytest skips `venv`, `node_modules` and any folder holding a `pyvenv.cfg`, and so does the grader's
    tree walk (third-party code): a failing test hidden there below the suite is found all the same. An
    installed package's own tests (below `site-packages`) are not the suite's."""
    from grader import tamper

    where = tmp_path / folder
    where.mkdir(parents=True)
    (where / "test_regressions.py").write_text("def test_feedback_is_an_intent():\n    assert False\n")
    if marker:
        (where / "pyvenv.cfg").write_text("home = /usr/bin\n")
    installed = tmp_path / "tests" / ".venv2" / "lib" / "python3.11" / "site-packages" / "pkg"
    installed.mkdir(parents=True)
    (installed / "pyvenv.cfg").write_text("")
    (installed / "test_pkg.py").write_text("def test_pkg():\n    assert False\n")
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    assert "no tests ran" in _pytest(tmp_path)

    scan = tamper.scan(tmp_path)
    outer = folder.split("/")[0] + "/" + folder.split("/")[1]
    assert scan.unentered == [outer if "node_modules" in folder else folder]
    assert [h.location for h in scan.hooks if h.kind == "collection"] == [f"{folder}/test_regressions.py:1"]

    entered = unshadow.enter_folder(tmp_path, scan.unentered[0])
    assert entered is not None and entered.endswith("__entered")
    assert "1 failed" in _pytest(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "where",
    ["tests/build/test_regressions.py", "tests/.slow/test_regressions.py", "tests/t\u0435st_regressions.py"],
)
def test_a_failing_test_pytest_never_collects_counts_and_is_named_where_it_is(
    where: str, tmp_path: Path, grade_cache: Path
) -> None:
    """Red team 26, F3 and 25, F5: 52/57 against 47 for the twin whose test ran; the evidence names the
    file in the submission, not the copy's renamed one."""
    from grader.grading import grade
    from grader.rubric import load_rubric
    from tests.adversarial.builders import commit, sample_copy
    from tests.helpers.git import GIT_ENV

    repo = commit(sample_copy(tmp_path / "cand"), "take-home submission")
    (repo / where).parent.mkdir(parents=True, exist_ok=True)
    (repo / where).write_text(
        "from support_triage_agent.agent import INTENTS\n\n\n"
        "def test_feedback_is_an_intent():\n    assert 'feedback' in INTENTS\n",
        encoding="utf-8",
    )
    # The sample's .gitignore lists build/: added by hand, as the red team did.
    subprocess.run(["git", "add", "-f", where], cwd=repo, check=True, env={**os.environ, **GIT_ENV})
    commit(repo, "work")

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=1)

    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    assert row["score"] <= 1, row
    assert f"{where}::test_feedback_is_an_intent" in row["evidence"], row["evidence"]
    # Why every test was run names the file that hid it (a skipped folder's file too).
    assert f"keep pytest from collecting them ({where}:1" in json.dumps(report, ensure_ascii=False), report
    assert "__entered" not in row["evidence"] and "tests/test_regressions.py" not in row["evidence"].replace(
        where, ""
    ), row["evidence"]


BODY_NEVER_RUNS = {
    # Red team 27, F4: one word added to a failing unittest test; unittest calls it, gets a coroutine, passes.
    "async": """
        import unittest

        from support_triage_agent.agent import INTENTS


        class TestIntents(unittest.TestCase):
            async def test_feedback_is_an_intent(self):
                self.assertIn("feedback", INTENTS)
        """,
    # F5: the same with a generator method, and a plain test whose code is swapped at module level.
    "generator": """
        import unittest

        from support_triage_agent.agent import INTENTS


        class TestIntents(unittest.TestCase):
            def test_feedback_is_an_intent(self):
                self.assertIn("feedback", INTENTS)
                yield
        """,
    "code": """
        from support_triage_agent.agent import INTENTS


        def test_feedback_is_an_intent():
            assert "feedback" in INTENTS


        def _checked():
            return None


        test_feedback_is_an_intent.__code__ = _checked.__code__
        """,
    "setattr": """
        from support_triage_agent.agent import INTENTS


        def test_feedback_is_an_intent():
            assert "feedback" in INTENTS


        setattr(test_feedback_is_an_intent, "__code__", (lambda: None).__code__)
        """,
}


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(BODY_NEVER_RUNS))
def test_a_failing_test_whose_body_never_runs_counts_as_failed(
    form: str, tmp_path: Path, grade_cache: Path
) -> None:
    """Red team 27, F4/F5: 55/57 against 50/57 for the twin whose test ran and failed. The body runs in the
    grader's runs (a `__code__` swap is undone in the whole-suite copy), or the test fails saying why it
    could not (a TestCase method returning a coroutine or a generator)."""
    import textwrap

    from grader.grading import grade
    from grader.rubric import load_rubric
    from tests.adversarial.builders import commit, sample_copy

    repo = commit(sample_copy(tmp_path / "cand"), "take-home submission")
    (repo / "tests" / "test_feedback.py").write_text(textwrap.dedent(BODY_NEVER_RUNS[form]), encoding="utf-8")
    commit(repo, "work")
    assert "1 passed" in _pytest_file(repo, "tests/test_feedback.py")  # as the candidate's own run shows it

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=1)

    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    if form in ("async", "generator"):
        # Failed in the suite's own run, as the twin's visible failure is, saying why.
        assert row["score"] == 2 and "1 failed" in row["evidence"], row
        failed = [d for d in row["details"] if d.startswith("failed: tests/test_feedback.py::")]
        assert failed and f"returned a {'coroutine' if form == 'async' else 'generator'}" in failed[0], row
    else:
        assert row["score"] <= 1, row
        assert "tests/test_feedback.py::test_feedback_is_an_intent" in row["evidence"], row


def _pytest_file(repo: Path, rel: str) -> str:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", rel],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout


def _listing(top: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (p.relative_to(top).as_posix(), p.read_bytes() if p.is_file() else b"") for p in top.rglob("*")
    )


def _host_folder(tmp_path: Path) -> Path:
    """A folder outside every checkout, laid out to be entered: a test below a `pyvenv.cfg`, in `build/`,
    in a dot folder."""
    host = tmp_path / "host" / "tp"
    for folder in ("envx", "build", ".slow"):
        (host / folder).mkdir(parents=True)
        (host / folder / "test_canary.py").write_text("def test_canary():\n    assert False\n")
    (host / "envx" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return host


def _escaping(host: Path) -> str:
    # Climbs to / from wherever the grader keeps its copy, as the red team's did.
    return "../" * 40 + host.as_posix().lstrip("/")


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_testpaths_outside_the_checkout_are_neither_scanned_nor_changed(tmp_path: Path, form: str) -> None:
    """Red team 31: `testpaths` naming `../../…/host/folder` had the grader walk that host folder and rename
    `envx/` and its `pyvenv.cfg` there, as root. Only folders inside the checkout are looked at or entered."""
    from grader import tamper

    host = _host_folder(tmp_path)
    before = _listing(host)
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    entry = _escaping(host) if form == "relative" else host.as_posix()
    (repo / "pyproject.toml").write_text(f'[tool.pytest.ini_options]\ntestpaths = ["tests", "{entry}"]\n')

    scan = tamper.scan(repo)

    assert scan.unentered == [], scan.unentered
    outside = os.path.relpath(host / "envx", repo)
    for rel in (outside, f"{outside}/../build", host.as_posix() + "/envx"):
        assert unshadow.enter_folder(repo, rel) is None
        assert unshadow.revive_file_name(repo, f"{rel}/test_c\u0430nary.py") is None
        assert unshadow.revive(repo, f"{rel}/test_canary.py") == []
    assert _listing(host) == before


@pytest.mark.slow
def test_a_grade_changes_nothing_testpaths_lead_out_to(tmp_path: Path, grade_cache: Path) -> None:
    """The red team's submission, graded: the host folder its `testpaths` names is as it was, and the
    grade is the honest sample's."""
    from grader.grading import grade
    from grader.rubric import load_rubric
    from tests.adversarial.builders import commit, sample_copy

    host = _host_folder(tmp_path)
    before = _listing(host)
    repo = sample_copy(tmp_path / "cand")
    pyproject = repo / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    assert 'testpaths = ["tests"]' in text
    pyproject.write_text(
        text.replace('testpaths = ["tests"]', f'testpaths = ["tests", "{_escaping(host)}"]'), encoding="utf-8"
    )
    commit(repo, "take-home submission")

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=1)

    assert _listing(host) == before
    row = next(r for r in report["rows"] if r["id"] == "offline-replay")
    assert row["score"] == 3, row
    assert "test_canary" not in json.dumps(report)


# --- red team 32: names that draw like test names, and rename targets already taken -----------------------


@pytest.mark.parametrize(
    ("name", "taken"),
    [
        ("t\u0435st_client_extra.py", True),  # look-alike letter, its ASCII name an honest passing module
        ("te\u200bst_regress.py", False),  # zero-width space
        ("test_regress.py ", False),  # trailing space
        ("te\u00adst_regress.py", False),  # soft hyphen
        ("test_regress.py\u200b", False),  # zero-width space after `.py`
    ],
)
def test_a_test_module_whose_name_only_reads_as_one_is_run_in_the_copy(
    tmp_path: Path, name: str, taken: bool
) -> None:
    """F-A, F-D: 52/57 against 47 for the twin. pytest passes over the file; the copy runs it under a name
    pytest collects, another one when its ASCII name is taken."""
    from grader import tamper

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / name).write_text("def test_regression():\n    assert False\n", encoding="utf-8")
    honest = tmp_path / "tests" / "test_client_extra.py"
    if taken:
        honest.write_text("def test_regression():\n    assert True\n", encoding="utf-8")
    before = _pytest(tmp_path)
    assert "failed" not in before, before

    scan = tamper.scan(tmp_path)
    assert scan.look_alike_files == [f"tests/{name}"], scan.look_alike_files
    renamed = unshadow.revive_file_name(tmp_path, f"tests/{name}")

    assert renamed is not None and renamed.isascii(), renamed
    assert "1 failed" in _pytest(tmp_path)
    if taken:
        assert honest.read_text(encoding="utf-8").endswith("assert True\n")  # left as it was


@pytest.mark.parametrize(
    "source",
    [
        # F-B: the name the grader renames the hidden definition to is already the module's.
        "def test_label_regression():\n    assert False\n"
        "def test_label_regression():\n    pass\n"
        "def test_label_regression__hidden_L1():\n    pass\n",
        # F-B: the same for a look-alike test name.
        "def t\u0435st_parse_roundtrip():\n    assert False\n"
        "def test_parse_roundtrip__look_alike_L1():\n    pass\n",
        # F-E: a name with an invisible combining grapheme joiner, a function and a class.
        "def te\u034fst_regress():\n    assert False\n",
        "class Te\u034fstRegressions:\n    def test_regress(self):\n        assert False\n",
    ],
    ids=["hidden-name-taken", "look-alike-name-taken", "invisible-function", "invisible-class"],
)
def test_a_hidden_test_comes_back_under_a_name_the_module_does_not_use(tmp_path: Path, source: str) -> None:
    module = tmp_path / "test_hidden.py"
    module.write_text(source, encoding="utf-8")
    assert "failed" not in _pytest(tmp_path)

    assert unshadow.revive(tmp_path, "test_hidden.py")

    assert module.read_text(encoding="utf-8").count("\n") == source.count("\n")
    assert "1 failed" in _pytest(tmp_path)
