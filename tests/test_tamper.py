"""Tamper evidence: the static hook scan, the guard plugin in a real pytest run, and adversarial submissions
graded end to end by the real `grade` command."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader import tamper
from tests.adversarial import CASES, build
from tests.adversarial.builders import SAMPLE
from tests.helpers.git import GIT_ENV

FORGING_CONFTEST = """
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def _kinds(scan: tamper.TamperScan) -> list[tuple[str, str]]:
    return [(h.kind, h.location) for h in scan.hooks]


# --- the static scan --------------------------------------------------------------------------------------


def test_sample_solution_has_no_tamper_hooks() -> None:
    result = tamper.scan(SAMPLE)
    assert result.hooks == [], result.hooks
    assert result.files_scanned > 5


def test_code_that_tells_a_probe_from_a_test_is_listed_with_its_line(tmp_path: Path) -> None:
    """Red-team R5/R5b: answers invented only under pytest, or unless the call came through __main__. The
    scan cannot prove intent; it lists each place for the reviewer (fingerprint hooks, not scored)."""
    _write(
        tmp_path,
        {
            "agent/quick.py": """
                import inspect
                import os
                import sys


                def under_tests():
                    return "pytest" in sys.modules


                def called_from_main():
                    return any(f.filename.endswith("__main__.py") for f in inspect.stack())


                def caller():
                    return sys._getframe(2).f_code.co_filename


                def in_a_test():
                    return bool(os.environ.get("PYTEST_CURRENT_TEST"))
                """,
            "agent/plain.py": """
                import sys


                def main():
                    return "json" in sys.modules or len(sys.argv) > 1
                """,
        },
    )
    hooks = sorted((h.kind, h.location) for h in tamper.scan(tmp_path).hooks)
    assert hooks == [
        ("fingerprint", "agent/quick.py:11"),
        ("fingerprint", "agent/quick.py:15"),
        ("fingerprint", "agent/quick.py:19"),
        ("fingerprint", "agent/quick.py:7"),
    ], hooks


def test_tests_kept_out_of_collection_are_listed(tmp_path: Path) -> None:
    """Red-team R12: a failing test hidden by `collect_ignore` or `__test__ = False` is in no count."""
    _write(
        tmp_path,
        {
            "tests/conftest.py": 'collect_ignore = ["test_zz_fail.py"]\n',
            "tests/test_edge.py": (
                "def test_edge_case():\n    assert False\n\n\ntest_edge_case.__test__ = False\n"
            ),
            "tests/test_ok.py": "def test_ok():\n    assert True\n",
        },
    )
    hooks = sorted((h.kind, h.location) for h in tamper.scan(tmp_path).hooks)
    assert hooks == [("collection", "tests/conftest.py:1"), ("collection", "tests/test_edge.py:5")], hooks


def test_tests_deleted_or_redefined_before_collection_are_listed(tmp_path: Path) -> None:
    """Red team 20, F1: `del test_x` or a second `def test_x` leaves pytest nothing to collect or rerun."""
    _write(
        tmp_path,
        {
            "tests/test_gone.py": "def test_label():\n    assert False\n\n\ndel test_label\n",
            "tests/test_twice.py": (
                "def test_label():\n    assert False\n\n\ndef test_label():\n    assert True\n\n\n"
                "class TestX:\n    def test_a(self):\n        assert False\n\n    test_a = None\n"
            ),
            # Not tests: a helper deleted, the same name in two classes.
            "tests/test_fine.py": (
                "def helper():\n    return 1\n\n\ndel helper\n\n\nclass TestA:\n    def test_one(self):\n"
                "        assert True\n\n\nclass TestB:\n    def test_one(self):\n        assert True\n"
            ),
        },
    )
    hooks = sorted((h.kind, h.location) for h in tamper.scan(tmp_path).hooks)
    assert hooks == [
        ("collection", "tests/test_gone.py:5"),
        ("collection", "tests/test_twice.py:13"),
        ("collection", "tests/test_twice.py:5"),
    ], hooks


def test_forging_makereport_wrapper_is_named_with_its_line(tmp_path: Path) -> None:
    _write(tmp_path, {"tests/conftest.py": FORGING_CONFTEST, "tests/test_x.py": "def test_x(): assert 0\n"})
    result = tamper.scan(tmp_path)
    assert ("pytest_runtest_makereport", "tests/conftest.py:5") in _kinds(result)
    assert any(
        h.kind == "pytest_report_outcome" and h.location == "tests/conftest.py:9" for h in result.hooks
    )
    assert result.outcome_hooks


def test_modifyitems_is_flagged_only_when_it_skips_or_drops(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "a/conftest.py": """
                def pytest_collection_modifyitems(config, items):
                    items.sort(key=lambda item: item.name)
                """,
            "b/conftest.py": """
                import pytest


                def pytest_collection_modifyitems(config, items):
                    for item in items:
                        item.add_marker(pytest.mark.skip(reason="later"))
                """,
            "c/conftest.py": """
                def pytest_collection_modifyitems(config, items):
                    keep = [i for i in items if "slow" not in i.name]
                    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
                    items[:] = keep
                """,
        },
    )
    hooks = {h.location.split("/")[0]: h.why for h in tamper.scan(tmp_path).hooks}
    assert "a" not in hooks
    assert "skip" in hooks["b"]
    assert "deselect" in hooks["c"]


def test_exit_status_and_internals_patching_are_flagged(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "conftest.py": """
                def pytest_sessionfinish(session, exitstatus):
                    session.exitstatus = 0
                """,
            "pkg/__init__.py": """
                from _pytest.reports import TestReport

                TestReport.outcome = property(lambda self: "passed")
                """,
            # Python folds identifiers by NFKC: a fullwidth letter still names TestReport.
            "pkg/wide.py": """
                from elsewhere import \uff34estReport

                \uff34estReport.outcome = "passed"
                """,
            "pkg/aliased.py": """
                from pytest import CallInfo as C

                C.excinfo = None
                """,
        },
    )
    kinds = _kinds(tamper.scan(tmp_path))
    assert ("pytest_sessionfinish", "conftest.py:2") in kinds
    assert ("monkeypatch", "pkg/__init__.py:3") in kinds
    assert ("monkeypatch", "pkg/wide.py:3") in kinds
    assert ("monkeypatch", "pkg/aliased.py:3") in kinds


def test_plugins_named_by_config_or_conftest_are_scanned(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pytest.ini": "[pytest]\naddopts = -p helpers.plug\n",
            "helpers/__init__.py": "",
            "helpers/plug.py": FORGING_CONFTEST,
            "tests/conftest.py": 'pytest_plugins = ["helpers.other"]\n',
            "helpers/other.py": "def pytest_report_teststatus(report, config):\n    return None\n",
            "helpers/not_a_plugin.py": FORGING_CONFTEST,  # never loaded by pytest: hooks there change nothing
        },
    )
    locations = {h.location for h in tamper.scan(tmp_path).outcome_hooks}
    assert "helpers/plug.py:5" in locations
    assert "helpers/other.py:1" in locations
    assert not any(loc.startswith("helpers/not_a_plugin.py") for loc in locations)


def test_config_overrides_of_the_grader_are_flagged(tmp_path: Path) -> None:
    _write(tmp_path, {"Makefile": "test:\n\tPYTEST_ADDOPTS= python -m pytest -p no:pytest_socket\n"})
    whys = [h.why for h in tamper.scan(tmp_path).hooks if h.kind == "config"]
    assert whys and "PYTEST_ADDOPTS" in whys[0]


def test_scan_never_follows_links_and_survives_bad_files(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    _write(outside, {"conftest.py": FORGING_CONFTEST})
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "conftest.py").symlink_to(outside / "conftest.py")
    (repo / "linked").symlink_to(outside, target_is_directory=True)
    (repo / "broken.py").write_bytes(b"def f(:\n\xff\xfe")
    (repo / os.fsdecode(b"caf\xe9.py")).write_bytes(b"x = '\xe9'\n")  # a non-UTF-8 file name
    result = tamper.scan(repo)
    assert result.hooks == []


# --- the guard plugin in a real pytest process -------------------------------------------------------------


def _run_guarded(
    tmp_path: Path,
    files: dict[str, str],
    *,
    unskip: bool = False,
    extra_env: dict[str, str] | None = None,
    plugins: tuple[str, ...] = (),
) -> tamper.GuardLog:
    project = _write(tmp_path / "project", files)
    plugin_dir = tmp_path / "plugin"
    tamper.write_guard(plugin_dir)
    log = tmp_path / "guard.jsonl"
    nonce = secrets.token_hex(8)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    audit_dir = Path(tamper.__file__).with_name("audit")  # the grader's other plugin, when asked for
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(plugin_dir), *([str(audit_dir)] if plugins else [])]),
        "PYTEST_REPORT_FD": str(fd),
        "PYTEST_REPORT_NONCE": nonce,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        **(extra_env or {}),
    }
    env.pop("PYTEST_ADDOPTS", None)
    if unskip:
        env["PYTEST_RUN_SKIPPED"] = "1"
    more = [arg for plugin in plugins for arg in ("-p", plugin)]
    argv = [sys.executable, "-m", "pytest", "-q", "-p", tamper.GUARD_MODULE, *more, "-p", "no:cacheprovider"]
    try:
        subprocess.run(
            argv,
            cwd=project,
            env=env,
            pass_fds=(fd,),
            capture_output=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(fd)
    return tamper.read_guard(log, nonce)


def test_guard_sees_through_a_forging_conftest(tmp_path: Path) -> None:
    log = _run_guarded(
        tmp_path,
        {
            "conftest.py": FORGING_CONFTEST,
            "test_x.py": "def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2, 'differ'\n",
        },
    )
    assert log.exitstatus is not None
    assert log.outcomes == {"test_x.py::test_ok": "passed", "test_x.py::test_bad": "failed"}
    assert len(log.rewritten) == 1 and "differ" in log.rewritten[0]


def test_guard_unskip_mode_runs_skipped_and_not_run_tests(tmp_path: Path) -> None:
    files = {
        "test_s.py": """
            import pytest


            @pytest.mark.skip(reason="later")
            def test_skipped():
                assert False, "hidden one"


            @pytest.mark.xfail(run=False)
            def test_notrun():
                raise RuntimeError("hidden two")
            """,
    }
    normal = _run_guarded(tmp_path / "a", files)
    assert normal.count("skipped") == 1 and normal.notrun == ["test_s.py::test_notrun"]
    forced = _run_guarded(tmp_path / "b", files, unskip=True)
    assert forced.outcomes == {"test_s.py::test_skipped": "failed", "test_s.py::test_notrun": "failed"}


def test_guard_unskip_mode_runs_unittest_skipped_and_expected_failures(tmp_path: Path) -> None:
    # Red team 4, F7: unittest's decorators skip and xfail without a pytest mark.
    files = {
        "test_u.py": """
            import unittest


            class Edge(unittest.TestCase):
                @unittest.skip("flaky on CI")
                def test_skipped(self):
                    self.assertEqual(1, 2, "hidden one")

                @unittest.expectedFailure
                def test_expected(self):
                    self.assertEqual(1, 2, "hidden two")

                def test_ok(self):
                    pass


            @unittest.skipIf(True, "not here")
            class Whole(unittest.TestCase):
                def test_inside(self):
                    self.assertEqual(1, 2, "hidden three")
            """,
    }
    normal = _run_guarded(tmp_path / "a", files)
    assert normal.count("skipped") == 2 and normal.count("xfailed") == 1, normal.outcomes
    forced = _run_guarded(tmp_path / "b", files, unskip=True)
    assert forced.outcomes == {
        "test_u.py::Edge::test_skipped": "failed",
        "test_u.py::Edge::test_expected": "failed",
        "test_u.py::Edge::test_ok": "passed",
        "test_u.py::Whole::test_inside": "failed",
    }


def test_guard_unskip_mode_fails_tests_marked_xfail_while_they_run(tmp_path: Path) -> None:
    """Red team 5, G2: an xfail mark added by a fixture (``request.applymarker``) or raised inside the
    test (``pytest.xfail``) comes after collection, where the marks are stripped: in the unskip rerun
    xfail is switched off (pytest's own ``--runxfail``), so such a test fails when its body fails."""
    files = {
        "test_d.py": """
            import pytest


            @pytest.fixture(autouse=True)
            def _flaky(request):
                if "known" in request.node.name:
                    request.applymarker(pytest.mark.xfail(reason="varies between snapshots"))


            def test_known_flaky():
                assert 1 == 2, "hidden one"


            def test_imperative():
                pytest.xfail("not today")


            def test_known_and_fine():
                pass
            """,
    }
    normal = _run_guarded(tmp_path / "a", files)
    assert normal.count("xfailed") == 2, normal.outcomes
    forced = _run_guarded(tmp_path / "b", files, unskip=True)
    assert forced.outcomes == {
        "test_d.py::test_known_flaky": "failed",
        "test_d.py::test_imperative": "failed",
        "test_d.py::test_known_and_fine": "passed",
    }


def test_lines_without_the_nonce_are_foreign(tmp_path: Path) -> None:
    log = tmp_path / "guard.jsonl"
    log.write_text(
        json.dumps({"nodeid": "t", "when": "call", "outcome": "passed", "n": "right"})
        + "\n"
        + json.dumps({"nodeid": "u", "when": "call", "outcome": "passed", "n": "wrong"})
        + "\nnot json\n",
        encoding="utf-8",
    )
    parsed = tamper.read_guard(log, "right")
    assert parsed.outcomes == {"t": "passed"} and parsed.foreign == 1


# --- adversarial submissions through the real `grade` ------------------------------------------------------


@pytest.mark.index
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_adversarial_submission_lands_in_its_band(
    name: str, tmp_path: Path, grade_cli, grade_cache: Path
) -> None:
    case = CASES[name]
    target = build(name, tmp_path / name)
    out = tmp_path / "report.json"
    done = grade_cli(
        [
            "--cache-dir",
            str(grade_cache),
            "--format",
            "json",
            "-q",
            "--timeout",
            "60",
            "-o",
            str(out),
            str(target),
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    rows = {row["id"]: row for row in report["rows"]}
    for row_id, (low, high) in case.bands.items():
        assert low <= rows[row_id]["score"] <= high, (name, rows[row_id])
    evidence = rows["offline-replay"]["evidence"]
    for needle in case.evidence:
        assert needle in evidence, (name, evidence)


def test_guard_ignores_an_inner_in_process_pytest(tmp_path: Path) -> None:
    log = _run_guarded(
        tmp_path,
        {
            "conftest.py": 'pytest_plugins = ["pytester"]\n',
            "test_outer.py": """
                def test_outer(pytester):
                    pytester.makepyfile(test_inner="def test_inner_fails():\\n    assert False\\n")
                    result = pytester.runpytest_inprocess("-p", "GUARD")
                    result.assert_outcomes(failed=1)
                """.replace("GUARD", tamper.GUARD_MODULE),
        },
    )
    assert log.outcomes == {"test_outer.py::test_outer": "passed"}, log.outcomes
    assert log.exitstatus == 0


@pytest.mark.index
def test_committed_bytecode_never_runs_in_place_of_the_source(
    make_submission, grade_cache: Path, tmp_path: Path
) -> None:
    # An unchecked hash-based .pyc (PEP 552) is loaded whatever the source says; a lone .pyc imports with
    # no source at all. Committed, either would run code that no check and no reviewer ever reads.
    import py_compile

    from grader.grading import grade
    from grader.rubric import load_rubric

    repo = make_submission(
        {
            "pkg/__init__.py": "",
            "pkg/answer.py": "VALUE = 1\n",
            "tests/test_answer.py": """
                from pkg import answer


                def test_the_source_runs():
                    assert answer.VALUE == 1


                def test_no_sourceless_module_imports():
                    import importlib.util

                    assert importlib.util.find_spec("pkg.ghost") is None
                """,
        }
    )
    forged = tmp_path / "forged.py"
    forged.write_text("VALUE = 2\n", encoding="utf-8")
    unchecked = py_compile.PycInvalidationMode.UNCHECKED_HASH
    tag = sys.implementation.cache_tag
    cached = repo / f"pkg/__pycache__/answer.{tag}.pyc"
    py_compile.compile(str(forged), str(cached), invalidation_mode=unchecked)
    py_compile.compile(str(forged), str(repo / "pkg/ghost.pyc"))
    env = {**os.environ, **GIT_ENV, "HOME": str(tmp_path)}
    for argv in (["git", "add", "-f", "-A"], ["git", "commit", "-qm", "bytecode"]):
        subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True)

    report = grade(str(repo), rubric=load_rubric(), timeout=120, cache_root=grade_cache, jobs=1)
    replay = report["facts"]["replay"]
    assert (replay["passed"], replay["failed"]) == (2, 0), replay


def test_an_honest_suite_with_subtests_is_counted_alike_by_the_guard_and_the_result_log(
    tmp_path: Path,
) -> None:
    # Red team 4, F9: each subtest's report carries its test's id; counted by the result log and not by the
    # guard, the two disagreed and an honest suite was called forged.
    from grader.audit import read_result_log
    from grader.context import _mismatch

    files = {
        "test_sub.py": """
            import unittest


            class Shapes(unittest.TestCase):
                def test_each_shape(self):
                    for shape in ("plain", "fenced"):
                        with self.subTest(shape=shape):
                            self.assertEqual(shape, "plain")


            def test_with_fixture(subtests):
                for shape in ("plain", "fenced"):
                    with subtests.test(shape=shape):
                        assert shape == "plain"


            def test_plain():
                pass
            """,
    }
    results = tmp_path / "results.jsonl"
    guard = _run_guarded(
        tmp_path / "p",
        files,
        extra_env={"PYTEST_RESULT_LOG": str(results)},
        plugins=("_grader_pytest",),
    )
    logged = read_result_log(results)
    assert guard.count("failed") == 2 and guard.count("passed") == 1, guard.outcomes
    assert _mismatch(guard, logged) == ""


SENDING_TESTS = {
    "tapes/hit.json": '{"choices": [{"message": {"content": "{\\"intent\\": \\"refund\\"}"}}]}',
    "test_send.py": """
        import asyncio
        import json
        from pathlib import Path

        import httpx

        HERE = Path(__file__).resolve().parent


        class TapeTransport(httpx.BaseTransport):
            def __init__(self, name, replace=None, streamed=False):
                self.name, self.replace, self.streamed = name, replace, streamed

            def handle_request(self, request):
                try:
                    body = (HERE / "tapes" / self.name).read_bytes()
                except FileNotFoundError:
                    if self.replace is None:
                        raise
                    body = b""
                if self.replace is not None:
                    body = json.dumps({"choices": [{"message": {"content": self.replace}}]}).encode()
                return httpx.Response(200, content=iter([body]) if self.streamed else body)


        class AsyncTapeTransport(httpx.AsyncBaseTransport):
            async def handle_async_request(self, request):
                return httpx.Response(200, content=(HERE / "tapes" / "hit.json").read_bytes())


        def post(transport):
            with httpx.Client(transport=transport, base_url="http://model.invalid") as client:
                body = {"messages": [{"role": "user", "content": "hi"}]}
                return client.post("/v1/chat/completions", json=body)


        def test_hit():
            assert post(TapeTransport("hit.json")).status_code == 200


        def test_replaced():
            post(TapeTransport("hit.json", replace='{"intent": "shipping"}'))


        def test_miss_answered():
            post(TapeTransport("none.json", replace='{"intent": "other"}'))


        def test_no_file_opened():
            post(httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True})))


        def test_async_hit():
            async def go():
                transport = AsyncTapeTransport()
                async with httpx.AsyncClient(transport=transport, base_url="http://m.invalid") as c:
                    return await c.post("/v1/x", json={})

            assert asyncio.run(go()).status_code == 200


        def test_streamed_is_not_read():
            transport = TapeTransport("hit.json", streamed=True)
            with httpx.Client(transport=transport, base_url="http://model.invalid") as client:
                with client.stream("POST", "/v1/chat/completions", json={}) as response:
                    assert response.status_code == 200
    """,
}


def test_guard_logs_what_the_client_was_handed_for_requests_that_opened_repository_files(
    tmp_path: Path,
) -> None:
    # Red team 17: the suite's own process is where a table of the layer's own shows, whatever request the
    # triage command would send.
    project = tmp_path / "project"
    log = _run_guarded(tmp_path, SENDING_TESTS, extra_env={"PY_AUDIT_ROOT": str(project)})

    assert log.outcomes and set(log.outcomes.values()) == {"passed"}, log.outcomes
    sends = {send.test.rsplit("::", 1)[-1]: send for send in log.sends}
    assert set(sends) == {"test_hit", "test_replaced", "test_miss_answered", "test_async_hit"}, sends
    assert sends["test_hit"].opened == ("tapes/hit.json",) and not sends["test_hit"].missing
    assert '\\"refund\\"' in sends["test_hit"].response
    assert json.loads(sends["test_hit"].request)["messages"][0]["content"] == "hi"
    assert sends["test_replaced"].opened == ("tapes/hit.json",)
    assert "shipping" in sends["test_replaced"].response and "refund" not in sends["test_replaced"].response
    assert sends["test_miss_answered"].opened == () and sends["test_miss_answered"].missing == (
        "tapes/none.json",
    )
    assert sends["test_miss_answered"].site.startswith("test_send.py:")
    assert sends["test_async_hit"].opened == ("tapes/hit.json",)
