"""The grading pipeline on small generated submissions: replay facts, timeouts, network, install failure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader import sandbox
from grader.checks import Check, CheckResult
from grader.context import makefile_targets, pytest_plugin_modules, read_junit
from grader.errors import NotAssessable
from grader.grading import _run_one, grade
from grader.rubric import load_rubric
from tests.helpers.tape import A_TAPE


def _row(report: dict, row_id: str) -> dict:
    return next(row for row in report["rows"] if row["id"] == row_id)


def _grade(repo: Path, cache: Path, *, timeout: float = 120) -> dict:
    return grade(str(repo), rubric=load_rubric(), timeout=timeout, cache_root=cache)


# --- fast: the parts that need no install


def test_makefile_targets_are_read_statically(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text(
        ".PHONY: test demo\nVAR := x\nrecord demo: deps\n\tpython -m x\ntest:\n\tpytest\n# lint:\nCC=gcc\n",
        encoding="utf-8",
    )
    assert makefile_targets(tmp_path) == {"record", "demo", "test"}
    assert makefile_targets(tmp_path / "nowhere") == set()


def test_pytest_plugins_come_from_dist_info_entry_points(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for dist, text in {
        "pytest_recording-0.13.dist-info": "[pytest11]\nrecording = pytest_recording.plugin\n",
        "pytest_socket-0.7.dist-info": "[pytest11]\nsocket = pytest_socket\n",
        "rich-13.dist-info": "[console_scripts]\nrich = rich.cli:main\n",
        "broken-1.dist-info": "[pytest11\nnot ini",
        "weird-1.dist-info": "[pytest11]\nx = os; rm -rf /\n",
    }.items():
        (site / dist).mkdir(parents=True)
        (site / dist / "entry_points.txt").write_text(text, encoding="utf-8")

    assert pytest_plugin_modules(tmp_path) == ["pytest_recording.plugin", "pytest_socket"]


@pytest.mark.parametrize("with_cp", [True, False])
def test_a_scratch_copy_keeps_links_as_links_with_or_without_cp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_cp: bool
) -> None:
    from grader.context import _copy_tree

    source = tmp_path / "source"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (source / "pkg" / "run.sh").chmod(0o755)
    (source / "outside").symlink_to("/etc/passwd")
    if not with_cp:
        monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    dest = tmp_path / "dest"
    dest.mkdir()

    _copy_tree(source, dest)

    assert (dest / "pkg" / "run.sh").read_text() == "#!/bin/sh\necho hi\n"
    assert (dest / "pkg" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (dest / "outside").is_symlink() and str((dest / "outside").readlink()) == "/etc/passwd"


@pytest.mark.parametrize("with_cp", [True, False])
def test_a_copy_without_the_tapes_never_copies_them_and_keeps_everything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_cp: bool
) -> None:
    from grader.context import _copy_tree_without

    source = tmp_path / "source"
    tapes = source / "tests" / "cassettes"
    (tapes / "sub").mkdir(parents=True)
    for name in ("a.json", "b.yaml", "sub/c.json"):
        (tapes / name).write_text("{}\n")
    (tapes / "README.md").write_text("how the tapes were made\n")
    (source / "tests" / "test_x.py").write_text("def test_x(): pass\n")
    (source / "pkg").mkdir()
    (source / "pkg" / "outside").symlink_to("/etc/passwd")
    if not with_cp:
        monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    dest = tmp_path / "dest"
    dest.mkdir()

    left = _copy_tree_without(source, dest, Path("tests/cassettes"), lambda p: p.suffix in (".json", ".yaml"))

    assert left == 3
    copied = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*"))
    assert copied == [
        "pkg",
        "pkg/outside",
        "tests",
        "tests/cassettes",
        "tests/cassettes/README.md",
        "tests/cassettes/sub",
        "tests/test_x.py",
    ]
    assert (dest / "pkg" / "outside").is_symlink()
    # A folder that is absolute (or climbs out, or is missing) leaves nothing out and reads nothing outside.
    whole = tmp_path / "whole"
    whole.mkdir()
    assert _copy_tree_without(source, whole, Path("/etc"), lambda p: True) == 0
    assert sorted(p.name for p in whole.iterdir()) == ["pkg", "tests"]
    assert (whole / "tests" / "cassettes" / "a.json").is_file()


def test_junit_fallback_counts_outcomes(tmp_path: Path) -> None:
    (tmp_path / "test_mix.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert 1 == 2, 'numbers differ'\n"
        "@pytest.mark.skip\ndef test_skip(): pass\n"
        "@pytest.mark.xfail\ndef test_xfail(): assert False\n"
        "@pytest.fixture\ndef boom(): raise RuntimeError('setup broke')\n"
        "def test_err(boom): pass\n",
        encoding="utf-8",
    )
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "test_mix.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )

    res = read_junit(junit)

    assert res is not None
    assert (res.passed, res.failed, res.errors, res.skipped, res.xfailed) == (1, 1, 1, 1, 1)
    assert any("test_bad" in line and "numbers differ" in line for line in res.first_failures)
    assert read_junit(tmp_path / "absent.xml") is None


def test_a_junit_file_with_entity_declarations_is_not_read(tmp_path: Path) -> None:
    # The suite's process can rewrite the JUnit file: a billion-laughs bomb (or an external entity) must
    # neither expand nor count, while the same results without the declarations do.
    lol = "&lol1;" * 10
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE s [<!ENTITY lol "lol"><!ENTITY lol1 "&lol;&lol;&lol;&lol;">'
        f'<!ENTITY lol2 "{lol}">]><testsuite><testcase classname="t" name="&lol2;"/></testsuite>'
    )
    (tmp_path / "bomb.xml").write_text(bomb, encoding="utf-8")
    external = (
        '<!DOCTYPE s [<!ENTITY x SYSTEM "file:///etc/passwd">]><testsuite><testcase name="&x;"/></testsuite>'
    )
    (tmp_path / "external.xml").write_text(external, encoding="utf-8")
    (tmp_path / "plain.xml").write_text('<testsuite><testcase classname="t" name="ok"/></testsuite>')

    assert read_junit(tmp_path / "bomb.xml") is None
    assert read_junit(tmp_path / "external.xml") is None
    plain = read_junit(tmp_path / "plain.xml")
    assert plain is not None and plain.passed == 1


def test_a_crashing_check_costs_only_its_row() -> None:
    def crashes(ctx: object) -> CheckResult:
        """Always crashes."""
        raise KeyError("tapes")

    def infra(ctx: object) -> CheckResult:
        """Infrastructure gone."""
        raise NotAssessable("the stand-in server did not start")

    crashed = _run_one(Check.from_function("crashes", crashes), "crashes", ctx=None)  # type: ignore[arg-type]
    assert crashed.crashed == "check 'crashes' crashed: KeyError: 'tapes'"
    assert crashed.not_assessable is None
    assert crashed.facts["summary"] == crashed.crashed

    gone = _run_one(Check.from_function("infra", infra), "infra", ctx=None)  # type: ignore[arg-type]
    assert gone.not_assessable == "the stand-in server did not start"

    missing = _run_one(None, "nope", ctx=None)  # type: ignore[arg-type]
    assert missing.not_assessable == "no check named 'nope' is installed"


# --- slow: whole submissions, installed and replayed in the sandbox

PASSING = {
    **A_TAPE,
    "tests/test_ok.py": """
        import os


        def test_adds():
            assert 1 + 1 == 2


        def test_no_key_in_sight():
            # The grader's own environment has a key; the sandbox must not pass it on.
            assert "OPENAI_API_KEY" not in os.environ
            assert "ANTHROPIC_API_KEY" not in os.environ


        def test_upper():
            assert "tape".upper() == "TAPE"
        """,
}


@pytest.mark.index
@pytest.mark.slow
def test_passing_suite_scores_full_offline_replay_without_leaking_keys(
    make_submission, grade_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from grader.report import FORMATS, render
    from grader.schemas import load_schema

    monkeypatch.setenv("OPENAI_API_KEY", "sk-grader-own-key-must-not-leak-0123456789")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-grader-own-key-must-not-leak-0123")
    repo = make_submission(PASSING)

    report = _grade(repo, grade_cache)

    row = _row(report, "offline-replay")
    assert row["status"] == "scored" and row["score"] == 3, row
    assert row["evidence"].startswith(
        "3 passed, 0 failed, 0 errors, 0 connection attempts (python -m pytest,"
    )
    facts = report["facts"]["replay"]
    assert (facts["passed"], facts["failed"], facts["network_attempts"], facts["timed_out"]) == (
        3,
        0,
        0,
        False,
    )
    # No Makefile: the row is scored (0), not skipped.
    assert _row(report, "make-targets")["score"] == 0
    assert report["facts"]["make-targets"]["has_test"] is False
    assert len(report["commit"]) == 40
    assert {"acquire", "install", "replay"} <= set(report["timings"])

    jsonschema.Draft202012Validator(load_schema("grade-report")).validate(report)
    for fmt in FORMATS:
        assert render(report, fmt).strip()
    assert "sk-grader-own-key" not in json.dumps(report)


@pytest.mark.index
@pytest.mark.slow
def test_make_test_is_the_replay_command_and_demo_runs(make_submission, grade_cache: Path) -> None:
    repo = make_submission(
        {
            **PASSING,
            # A demo that reads its tape: one that opens none is a canned demo (test_make_targets_demo.py).
            "Makefile": 'test:\n\tpython -m pytest -q\n\ndemo:\n\t@python -c "import pathlib; '
            "print(len(next(pathlib.Path('cassettes').glob('*.json')).read_text()))\"\n\n"
            "record:\n\t@echo 'set OPENAI_API_KEY to record' >&2; exit 1\n",
        }
    )

    report = _grade(repo, grade_cache)

    assert report["facts"]["replay"]["command"] == "make test"
    assert _row(report, "offline-replay")["score"] == 3
    mt = report["facts"]["make-targets"]
    assert mt["has_record"] and mt["has_test"] and mt["has_demo"]
    assert mt["test_passed"] and mt["demo_passed"] and mt["record_refuses_without_key"], mt
    assert mt["demo_read_tapes"], mt
    assert _row(report, "make-targets")["score"] == load_rubric().max


@pytest.mark.index
@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_probes_run_on_the_submission_as_submitted_not_on_what_the_suite_left(
    make_submission, grade_cache: Path, jobs: int
) -> None:
    # The replay suite runs in the checkout and may write there; every probe's copy (here the record
    # target's no-key run, which comes after the suite at any --jobs) is made from the checkout as acquired.
    repo = make_submission(
        {
            "tests/test_writes.py": """
                from pathlib import Path


                def test_leaves_a_file():
                    Path("leftover.txt").write_text("written by the replay suite")
                """,
            "Makefile": "test:\n\tpython -m pytest -q\n\n"
            "record:\n\t@if [ -e leftover.txt ]; then echo 'leftover.txt from an earlier run'; sleep 30; fi\n"
            "\t@echo 'set OPENAI_API_KEY to record' >&2; exit 1\n",
        }
    )

    report = grade(str(repo), rubric=load_rubric(), timeout=20, cache_root=grade_cache, jobs=jobs)

    assert report["facts"]["make-targets"]["test_passed"] is True
    assert report["facts"]["make-targets"]["record_refuses_without_key"] is True, report["facts"][
        "make-targets"
    ]
    assert not (repo / "leftover.txt").exists()  # nothing ran in the submitter's own folder


@pytest.mark.index
@pytest.mark.slow
def test_counts_come_from_the_grader_not_the_suite_output(make_submission, grade_cache: Path) -> None:
    repo = make_submission(
        {
            "tests/test_loud.py": """
                import sys


                def test_real_failure():
                    print("=" * 20 + " 50 passed in 0.01s " + "=" * 20)
                    sys.stderr.write("50 passed, 0 failed\\n")
                    assert False, "the only test fails"
                """,
        }
    )

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert (facts["passed"], facts["failed"]) == (0, 1), facts
    assert _row(report, "offline-replay")["score"] == 0


@pytest.mark.slow
def test_a_check_failing_after_its_tests_call_is_an_honest_error_not_a_forgery(
    make_submission, grade_cache: Path
) -> None:
    """A thread the test left running fails after pytest reported the test passed (exit status 0): the
    guard's own finding, counted as that test's error; the run did not lie, so nothing is called forged."""
    repo = make_submission(
        {
            "tests/test_late.py": """
                import threading
                import time


                def _check():
                    time.sleep(1.0)
                    assert 1 + 1 == 3, "refunds need a human"


                def test_ok():
                    pass


                def test_late():
                    threading.Thread(target=_check, daemon=True).start()
                """,
        }
    )

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert (facts["passed"], facts["failed"], facts["errors"]) == (1, 0, 1), facts
    assert facts["forged"] is False, facts
    row = _row(report, "offline-replay")
    assert row["score"] < 3 and "FORGED" not in row["evidence"], row


@pytest.mark.index
@pytest.mark.slow
def test_hanging_suite_is_graded_within_the_timeout(make_submission, grade_cache: Path) -> None:
    repo = make_submission(
        {
            "tests/test_hang.py": """
                import time


                def test_quick():
                    pass


                def test_hangs():
                    time.sleep(3600)
                """,
        }
    )

    report = _grade(repo, grade_cache, timeout=8)

    row = _row(report, "offline-replay")
    assert row["status"] == "scored" and row["score"] == 0, row
    assert "timed out after 8 s" in row["evidence"]
    assert report["facts"]["replay"]["timed_out"] is True
    # Stopped at its timeout, not after the test's hour: only a replay that waited the hour out reaches it
    # (no tighter bound: a busy machine is slow, not wrong; speed is measured in `nox -s bench`).
    assert report["timings"]["replay"] < 3600


@pytest.mark.index
@pytest.mark.slow
def test_network_use_a_test_swallows_is_still_counted(make_submission, grade_cache: Path) -> None:
    # pytest-socket refuses before a socket exists and these tests swallow the refusal: nothing fails, yet
    # each line tried the network. Every one must be counted, with the line that tried.
    repo = make_submission(
        {
            "tests/test_quiet.py": """
                import socket
                import threading

                import httpx


                def test_swallowed_httpx_request():
                    try:
                        httpx.get("https://api.openai.com/v1/models", timeout=2)
                    except Exception:
                        pass


                def test_swallowed_raw_connect():
                    try:
                        socket.create_connection(("93.184.216.34", 443), timeout=2)
                    except Exception:
                        pass


                def test_dns_lookup():
                    try:
                        socket.getaddrinfo("api.anthropic.com", 443)
                    except Exception:
                        pass


                def _background():
                    try:
                        socket.getaddrinfo("pricing.example.invalid", 443)
                    except Exception:
                        pass


                def test_lookup_from_a_thread():
                    worker = threading.Thread(target=_background)
                    worker.start()
                    worker.join()
                """,
        },
        dependencies=["httpx"],
    )

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["passed"] == 4 and facts["failed"] == 0, facts
    assert facts["network_attempts"] == 4, facts
    row = _row(report, "offline-replay")
    assert row["score"] < 3
    details = "\n".join(row["details"])
    for line, target in ((9, "api.openai.com:443"), (16, "93.184.216.34:443"), (23, "api.anthropic.com:443")):
        assert f"tests/test_quiet.py:{line}: socket.refused {target}" in details, details
    assert "tests/test_quiet.py:30: socket.refused pricing.example.invalid:443" in details, details


@pytest.mark.index
@pytest.mark.slow
def test_connection_attempts_are_counted_with_their_location(make_submission, grade_cache: Path) -> None:
    repo = make_submission(
        {
            "tests/test_net.py": """
                import socket


                def test_loopback():
                    socket.create_connection(("127.0.0.1", 9), timeout=2).close()


                def test_remote():
                    socket.create_connection(("93.184.216.34", 80), timeout=2).close()


                def test_fine():
                    assert True
                """,
        }
    )

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["network_attempts"] >= 2, facts
    assert facts["first_network_attempt"].startswith("tests/test_net.py:"), facts
    assert facts["passed"] == 1 and facts["failed"] == 2
    row = _row(report, "offline-replay")
    assert row["score"] == 0  # two of its three tests fail: most of the suite does not pass offline
    assert "connection attempts" in row["evidence"]
    assert any("tests/test_net.py:5" in line for line in row["details"]), row["details"]
    assert any("tests/test_net.py:9" in line for line in row["details"]), row["details"]


@pytest.mark.index
@pytest.mark.slow
def test_uninstallable_submission_is_scored_as_its_own_failure_not_a_crash(
    make_submission, grade_cache: Path, grade_cli, tmp_path: Path
) -> None:
    repo = make_submission(
        {"tests/test_ok.py": "def test_ok():\n    assert True\n"},
        # No such project on the index: the grader's probes pass, so the failure is the submission's.
        dependencies=["cassette-grader-no-such-package-4f2a9"],
    )

    done = grade_cli(
        ["--cache-dir", str(grade_cache), "--format", "json", "--timeout", "120", str(repo)], cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    for row_id in ("offline-replay", "make-targets"):
        row = _row(report, row_id)
        assert row["status"] == "scored" and row["score"] == 0, row
        assert "not run: the submission's dependencies cannot be installed" in row["evidence"], row
        assert "cassette-grader-no-such-package-4f2a9" in row["evidence"]
    assert any(note.startswith("install failed (the submission's): ") for note in report.get("notes", []))
    assert "[install]" in done.stderr and "failed" in done.stderr


@pytest.mark.index
@pytest.mark.slow
def test_evidence_points_into_the_submission_never_the_graders_workspace_or_cache(
    make_submission, grade_cache: Path
) -> None:
    repo = make_submission(
        {
            "tests/test_paths.py": """
                import os
                from pathlib import Path

                import httpx


                def test_names_where_it_runs():
                    assert False, f"expected {Path(os.getcwd()) / 'cassettes' / 'abc.json'}"


                def test_fails_inside_a_dependency():
                    httpx.Request("GET", "http://[::1")
                """,
        },
        dependencies=["httpx"],
    )

    report = _grade(repo, grade_cache)

    lines = [line for row in report["rows"] for line in (row["evidence"], *row["details"])]
    lines += [f"{f['location']} {f['message']}" for f in report["findings"]]
    text = "\n".join(lines)
    assert "tests/test_paths.py::test_fails_inside_a_dependency (tests/test_paths.py:12)" in text, text
    assert "expected cassettes/abc.json" in text, text
    assert str(grade_cache) not in text and "/tmp/" not in text and "/lib/python" not in text, text
    details = _row(report, "offline-replay")["details"]
    assert len(details) == len(set(details)), details


@pytest.mark.index
@pytest.mark.slow
@pytest.mark.parametrize(
    "files",
    [
        pytest.param({"Makefile": "test:\n\tpython -m pytest || true\n"}, id="make-or-true"),
        pytest.param(
            {"conftest.py": "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n"},
            id="sessionfinish-forces-0",
        ),
    ],
)
def test_a_suite_that_reports_success_with_failures_recorded_is_forged(
    make_submission, grade_cache: Path, files: dict[str, str]
) -> None:
    repo = make_submission(
        {
            **files,
            "tests/test_red.py": """
                def test_one():
                    assert 1 == 2


                def test_two():
                    assert "a" == "b"


                def test_fine():
                    assert True
                """,
        }
    )

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 2 and facts["forged"] is True, facts
    row = _row(report, "offline-replay")
    assert row["score"] <= 1
    assert "with 2 failures recorded" in row["evidence"], row["evidence"]


@pytest.mark.index
@pytest.mark.slow
def test_a_toml_nesting_bomb_is_a_malformed_pyproject_not_a_crash(make_submission, grade_cache: Path) -> None:
    # Found by the blind red-team: 100,000 nested arrays made tomllib raise RecursionError, and `grade`
    # exited 1 (an internal error) instead of grading the submission.
    bomb = "x = " + "[" * 100_000 + "\n"
    repo = make_submission({"tests/test_ok.py": "def test_ok():\n    assert True\n"}, pyproject=bomb)

    report = _grade(repo, grade_cache)

    assert any("pyproject.toml is not valid TOML" in note for note in report.get("notes", [])), report
    rubric = load_rubric()
    assert report["total"]["max"] == sum(rubric.max * row.weight for row in rubric.rows)  # every row scored


@pytest.mark.index
@pytest.mark.slow
def test_a_suite_that_asks_the_network_through_another_program_is_not_offline(
    make_submission, grade_cache: Path
) -> None:
    """Red team 6, H4: a passing test whose network attempt is a `getent`/`curl` child (no Python the audit
    hook sees, no socket pytest-socket refuses) is counted by the suite's own network namespace."""
    if shutil.which("getent") is None or sandbox.isolation().network != "namespace+pytest-socket":
        pytest.skip("needs getent and a network namespace (the counter is the namespace's)")
    asks = (
        "import subprocess\n\n\ndef test_endpoint_reachability_is_optional():\n"
        '    subprocess.run(["getent", "ahosts", "api.openai.com"], capture_output=True, check=False)\n'
    )
    repo = make_submission({**PASSING, "tests/test_reach.py": asks})

    report = _grade(repo, grade_cache)

    facts = report["facts"]["replay"]
    assert facts["failed"] == 0 and facts["passed"] > 0, facts
    assert facts["network_attempts"] == 1 and facts["first_network_attempt"] == "(the suite's run)", facts
    row = _row(report, "offline-replay")
    assert row["score"] < load_rubric().max, row
    assert "1 connection attempt" in row["evidence"], row


@pytest.mark.index
@pytest.mark.slow
def test_a_demo_that_asks_the_network_through_another_program_fails(
    make_submission, grade_cache: Path
) -> None:
    """Red team 5, G6's counter: the demo's own network namespace counts what a non-Python process sent."""
    if shutil.which("getent") is None or sandbox.isolation().network != "namespace+pytest-socket":
        pytest.skip("needs getent and a network namespace (the counter is the namespace's)")
    repo = make_submission(
        {**PASSING, "Makefile": "test:\n\tpython -m pytest -q\n\ndemo:\n\t-getent ahosts api.openai.com\n"}
    )

    report = _grade(repo, grade_cache)

    mt = report["facts"]["make-targets"]
    assert mt["test_passed"] and not mt["demo_passed"], mt
    assert any("connection attempt" in d for d in _row(report, "make-targets")["details"])
