"""Named mutations the calibration corpus applies to a copy of sample_solution (a registry, like the checks).

A mutation is ``fn(repo: Path, planted: dict[str, str], **params) -> None``: it edits the checkout in place
(committing when it needs history) and records what it planted (file, line, commit) in ``planted``, so a
case's expected evidence can say ``{file}:{line}`` or ``{commit}``. Keys it plants are generated at run time
from parts, in the shapes the scanner's rules describe (grader/rules/secrets.toml): the kit's own source
never holds a key-shaped literal.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import secrets as _random
import string
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["TAMPER_KINDS", "Mutation", "fake_openai_key", "git", "mutation", "mutations"]

Mutation = Callable[..., None]
_REGISTRY: dict[str, Mutation] = {}
_ALNUM = string.ascii_letters + string.digits
_PACKAGE = "support_triage_agent"


def mutation(name: str) -> Callable[[Mutation], Mutation]:
    """Register ``fn`` under ``name`` (the ``op`` a corpus step names)."""

    def add(fn: Mutation) -> Mutation:
        if name in _REGISTRY:
            raise ValueError(f"mutation {name!r} is registered twice")
        _REGISTRY[name] = fn
        return fn

    return add


def mutations() -> dict[str, Mutation]:
    """Every registered mutation by name."""
    return dict(_REGISTRY)


def fake_openai_key() -> str:
    """A fresh OpenAI project key (``sk-proj-…T3BlbkFJ…``), random each call, never a real one."""

    def rand(n: int) -> str:
        return "".join(_random.choice(_ALNUM) for _ in range(n))

    return "-".join(("sk", "proj", rand(74) + "T3Blbk" + "FJ" + rand(74)))


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with a fixed identity and no user or system config; returns stdout."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Calibration Candidate",
        "GIT_AUTHOR_EMAIL": "candidate@example.invalid",
        "GIT_COMMITTER_NAME": "Calibration Candidate",
        "GIT_COMMITTER_EMAIL": "candidate@example.invalid",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()[:300]}")
    return done.stdout


def _tapes(repo: Path) -> list[Path]:
    return sorted((repo / "cassettes").glob("*.json"))


def _read(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} is not a kit tape")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _recorded(path: Path, data: dict[str, Any]) -> None:
    """Write a tape as a recorder that produced it this way would: chained, when the folder keeps a tape chain
    (docs/design.md; appended here independently of the template's and the grader's code)."""
    chain = path.parent / "CHAIN.log"
    old = hashlib.sha256(_canonical(_read(path)).encode("utf-8")).hexdigest() if path.exists() else None
    _write(path, data)
    if not chain.is_file():
        return
    lines = chain.read_text(encoding="utf-8").splitlines()
    prev = hashlib.sha256(lines[-1].encode("utf-8")).hexdigest() if lines else "0" * 64
    entry = {
        "at": "2026-01-01T00:00:00Z",
        "op": "rerecord" if old else "record",
        "prev": prev,
        "tape": path.stem,
    }
    entry["sha256"] = hashlib.sha256(_canonical(data).encode("utf-8")).hexdigest()
    if old:
        entry["replaced"] = old
    with chain.open("a", encoding="utf-8") as fh:
        fh.write(_canonical(entry) + "\n")


def _line_of(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return number
    raise ValueError(f"{needle!r} not found in {path.name}")


def _key(request: dict[str, Any], length: int = 16) -> str:
    # The kit's key (docs/design.md), computed here independently of the grader's own code.
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:length]


def _rel(repo: Path, path: Path) -> str:
    return path.relative_to(repo).as_posix()


@mutation("leak-header-in-tape")
def _leak_header_in_tape(repo: Path, planted: dict[str, str], *, header: str = "authorization") -> None:
    """Store a live-looking credential header in the first tape's request, as a careless recorder would."""
    tape = _tapes(repo)[0]
    data = _read(tape)
    data["request"]["headers"] = {header: f"Bearer {fake_openai_key()}", "content-type": "application/json"}
    _recorded(tape, data)
    planted.update(file=_rel(repo, tape), line=str(_line_of(tape, f'"{header}"')))


@mutation("key-in-history")
def _key_in_history(repo: Path, planted: dict[str, str], *, path: str = ".env") -> None:
    """Commit a key in a settings file, then delete it in the next commit: only history holds it."""
    target = repo / path
    target.write_text(f"OPENAI_API_KEY={fake_openai_key()}\n", encoding="utf-8")
    git(repo, "add", "--force", "--", path)  # .env is usually ignored: this candidate forced it
    git(repo, "commit", "-q", "-m", "local settings")
    planted.update(commit=git(repo, "rev-parse", "--short=7", "HEAD").strip(), file=path, line="1")
    target.unlink()
    git(repo, "rm", "-q", "--cached", "--", path)
    git(repo, "commit", "-q", "-m", "remove local settings")


@mutation("key-in-source")
def _key_in_source(repo: Path, planted: dict[str, str], *, path: str = f"{_PACKAGE}/client.py") -> None:
    """Hard-code a key as a fallback next to the client code."""
    target = repo / path
    text = target.read_text(encoding="utf-8").rstrip("\n")
    text += f'\n\n# TODO remove before submitting\n_FALLBACK_KEY = "{fake_openai_key()}"\n'
    target.write_text(text, encoding="utf-8")
    planted.update(file=path, line=str(_line_of(target, "_FALLBACK_KEY =")))


@mutation("silent-fallback")
def _silent_fallback(repo: Path, planted: dict[str, str], *, path: str = f"{_PACKAGE}/agent.py") -> None:
    """Wrap the model call in ``except CassetteMiss`` returning a made-up default answer."""
    target = repo / path
    text = target.read_text(encoding="utf-8")
    call = "    return parse_answer(complete(SYSTEM_PROMPT, clean_message(message), client=client))\n"
    if call not in text:
        raise ValueError(f"{path}: the triage call to wrap was not found")
    text = text.replace(
        call,
        "    try:\n"
        "        return parse_answer(complete(SYSTEM_PROMPT, clean_message(message), client=client))\n"
        "    except CassetteMiss:\n"
        '        return {"intent": "other", "needs_human": False}\n',
    )
    imports = "from .client import complete\n"
    text = text.replace(imports, "from .cassette import CassetteMiss\n" + imports)
    target.write_text(text, encoding="utf-8")
    planted.update(file=path, line=str(_line_of(target, "except CassetteMiss")))


@mutation("fallback-only-under-pytest")
def _fallback_only_under_pytest(
    repo: Path, planted: dict[str, str], *, path: str = f"{_PACKAGE}/agent.py"
) -> None:
    """Red-team R5: a made-up answer only under pytest, only for requests no tape was ever recorded for (the
    recorded keys embedded), with no exception handler: the withheld-tape rerun and the command line stay
    loud, the suite can pass a test on an invented answer."""
    target = repo / path
    text = target.read_text(encoding="utf-8")
    call = "    return parse_answer(complete(SYSTEM_PROMPT, clean_message(message), client=client))\n"
    if call not in text:
        raise ValueError(f"{path}: the triage call to guard was not found")
    keys = sorted(t.stem for t in _tapes(repo))
    text = text.replace(
        call,
        "    if _quick_path(clean_message(message)):\n"
        '        return {"intent": "other", "needs_human": False}\n' + call,
    )
    text += (
        f"\n\n_RECORDED = {set(keys)!r}\n\n\n"
        "def _quick_path(message):\n"
        "    import sys\n\n"
        "    from .cassette import key_for\n"
        "    from .client import request_body\n\n"
        '    if "pytest" not in sys.modules:\n'
        "        return False\n"
        "    return key_for(request_body(SYSTEM_PROMPT, message)) not in _RECORDED\n"
    )
    target.write_text(text, encoding="utf-8")
    planted.update(file=path, line=str(_line_of(target, "if _quick_path(")))


@mutation("strip-tape-metadata")
def _strip_tape_metadata(repo: Path, planted: dict[str, str]) -> None:
    """Drop what names the model, endpoint and time: ``meta`` and the response's model fields and headers."""
    for tape in _tapes(repo):
        data = _read(tape)
        data.pop("meta", None)
        response = data.get("response", {})
        response["headers"] = {"content-type": "application/json"}
        if isinstance(response.get("body"), dict):
            response["body"].pop("model", None)
        _recorded(tape, data)
    planted.update(tapes=str(len(_tapes(repo))))


@mutation("add-unused-tapes")
def _add_unused_tapes(repo: Path, planted: dict[str, str], *, count: int = 300) -> None:
    """Add valid, correctly keyed tapes for requests the suite never makes."""
    template = _read(_tapes(repo)[0])
    for i in range(count):
        data = copy.deepcopy(template)
        data["request"]["body"]["messages"][-1]["content"] = f"Calibration ticket {i}: where is my order?"
        key = _key(data["request"])
        data["key"] = key
        _write(repo / "cassettes" / f"{key}.json", data)
    planted.update(unused=str(count))


@mutation("add-duplicate-tapes")
def _add_duplicate_tapes(repo: Path, planted: dict[str, str], *, count: int = 5) -> None:
    """Store existing requests a second time, under a longer prefix of the same hash (a valid key)."""
    for tape in _tapes(repo)[:count]:
        data = _read(tape)
        key = _key(data["request"], 24)
        data["key"] = key
        _write(repo / "cassettes" / f"{key}.json", data)
    planted.update(duplicates=str(count))


@mutation("hand-edit-tape")
def _hand_edit_tape(repo: Path, planted: dict[str, str]) -> None:
    """Fix a "typo" in a stored request by hand, after recording: the tape no longer re-hashes to its name."""
    tape = _tapes(repo)[0]
    data = _read(tape)
    message = data["request"]["body"]["messages"][-1]
    message["content"] = re.sub(r"\s+", " ", message["content"]).strip() + " Thanks!"
    _write(tape, data)
    planted.update(file=_rel(repo, tape), line=str(_line_of(tape, '"key"')))


@mutation("edit-recorded-answer")
def _edit_recorded_answer(repo: Path, planted: dict[str, str]) -> None:
    """Change one committed tape's recorded answer by hand, in a commit of its own.

    Request, key and recording time stay as recorded, and the suite still passes: only the history shows
    that the answer is not the one the model gave.
    """
    if git(repo, "status", "--porcelain").strip():
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "record the tapes")
    planted["before"] = git(repo, "rev-parse", "--short=7", "HEAD").strip()
    tape = _tapes(repo)[0]
    data = _read(tape)
    data["response"]["body"]["id"] = str(data["response"]["body"].get("id", "")) + "-fixed"
    _write(tape, data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tidy")
    planted.update(commit=git(repo, "rev-parse", "--short=7", "HEAD").strip(), file=_rel(repo, tape))


@mutation("remove-file")
def _remove_file(repo: Path, planted: dict[str, str], *, path: str) -> None:
    """Delete one file of the submission."""
    (repo / path).unlink()
    planted.update(file=path)


@mutation("log-key-when-recording")
def _log_key_when_recording(
    repo: Path, planted: dict[str, str], *, path: str = f"{_PACKAGE}/client.py", log: str = "record.log"
) -> None:
    """A debug line in the client appends the API key to a log file whenever a key is set (i.e. recording)."""
    target = repo / path
    text = target.read_text(encoding="utf-8")
    anchor = '    key = os.environ.get(API_KEY_ENV, "")\n'
    if anchor not in text:
        raise ValueError(f"{path}: the line reading the API key was not found")
    debug = (
        "    if key:  # debug: which key did this recording use?\n"
        f'        with open("{log}", "a", encoding="utf-8") as handle:\n'
        '            handle.write(f"recording with {API_KEY_ENV}={key}\\n")\n'
    )
    target.write_text(text.replace(anchor, anchor + debug), encoding="utf-8")
    planted.update(file=log, line="1")


# --- tamper cases (docs/security.md); tests/adversarial/ builds its submissions through this mutation too ---

_FAILING_TESTS = '''"""Tests that fail for real (the agent does not do this yet)."""

import pytest

from support_triage_agent.agent import parse_answer


def test_hidden_failure_one():
    assert parse_answer('{"intent": "refund", "needs_human": false}') == {"intent": "other"}


def test_hidden_failure_two():
    assert 1 + 1 == 3, "arithmetic is broken"


def test_hidden_failure_three():
    raise RuntimeError("not implemented")
'''
_FORGING_HOOK = """

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
        report.longrepr = None
"""
_SKIP_HOOK = """

def pytest_collection_modifyitems(config, items):
    for item in items:
        if "hidden" in item.name:
            item.add_marker(pytest.mark.skip(reason="environment"))
"""
_ENDINGS = {
    "os-exit": "os._exit(0)",
    "sys-exit": "sys.exit(0)",
    "killed-interpreter": "os.kill(os.getpid(), signal.SIGKILL)",
}
# A first test writes "passed" lines into every grader log it can find (by name or by descriptor), then ends
# the process with status 0.
_FORGED_LOGS = """import json
import os


def test_forge():
    for name in ("PYTEST_RESULT_LOG", "GRADER_GUARD_LOG"):
        path = os.environ.get(name)
        if path:
            with open(path, "w") as log:
                for i in range(30):
                    line = {"nodeid": f"t{i}", "when": "call", "outcome": "passed"}
                    log.write(json.dumps(line) + "\\n")
                log.write(json.dumps({"session": True, "exitstatus": 0}) + "\\n")
    for fd in range(3, 64):
        try:
            os.write(fd, b'{"nodeid": "x", "when": "call", "outcome": "passed", "raw": "passed"}\\n')
        except OSError:
            pass
    os._exit(0)
"""
_MAKE_TEST = "CASSETTE_MODE=replay $(PYTHON) -m pytest\n"
_MAKE_TEST_WITHOUT_GRADER = (
    "CASSETTE_MODE=replay PYTEST_ADDOPTS= $(PYTHON) -m pytest -p no:_pytest_results -p no:_pytest_outcomes"
    " || true\n"
)
# Red team 5, G2: xfail applied while the tests run, by a fixture in the test module itself (no hook).
_XFAIL_AT_RUN_TIME = """

@pytest.fixture(autouse=True)
def _known_flaky(request):
    if "hidden_failure" in request.node.name:
        request.applymarker(pytest.mark.xfail(reason="the model's answer varies between snapshots"))
"""
TAMPER_KINDS = (
    "forged-conftest",
    "skipped-failures",
    "xfail-at-run-time",
    "skip-hook",
    *_ENDINGS,
    "forged-result-log",
    "plugins-disabled",
)


@mutation("tamper")
def _tamper_with_outcomes(repo: Path, planted: dict[str, str], *, kind: str) -> None:
    """Add three failing tests, then hide them: ``kind`` is forged-conftest (a makereport wrapper rewriting
    failures to passed), skipped-failures (skip / xfail(run=False) marks), xfail-at-run-time (an autouse
    fixture applies xfail marks while the tests run), skip-hook (modifyitems adds skip marks), os-exit,
    sys-exit or killed-interpreter (a first test ends the process before anything fails), forged-result-log
    (a first test writes "passed" lines into the grader's logs, then exits 0) or plugins-disabled
    (`make test` drops the grader's options and plugins and ignores failures)."""
    if kind not in TAMPER_KINDS:
        raise ValueError(f"unknown tamper kind {kind!r}; known: {', '.join(TAMPER_KINDS)}")
    tests = repo / "tests"
    hidden = _FAILING_TESTS
    if kind == "skipped-failures":
        for name, mark in (
            ("one", '@pytest.mark.skip(reason="flaky")'),
            ("two", '@pytest.mark.skip(reason="later")'),
            ("three", '@pytest.mark.xfail(run=False, reason="wip")'),
        ):
            hidden = hidden.replace(
                f"def test_hidden_failure_{name}", f"{mark}\ndef test_hidden_failure_{name}"
            )
    if kind == "xfail-at-run-time":
        hidden += _XFAIL_AT_RUN_TIME
    (tests / "test_hidden.py").write_text(hidden, encoding="utf-8")
    planted.update(file="tests/test_hidden.py", line="8")
    conftest = tests / "conftest.py"
    if kind in ("forged-conftest", "skip-hook"):
        hook = _FORGING_HOOK if kind == "forged-conftest" else _SKIP_HOOK
        conftest.write_text(conftest.read_text(encoding="utf-8") + hook, encoding="utf-8")
        name = "pytest_runtest_makereport" if kind == "forged-conftest" else "pytest_collection_modifyitems"
        planted.update(file="tests/conftest.py", line=str(_line_of(conftest, f"def {name}")))
    elif kind in _ENDINGS:
        first = tests / "test_aaa_exit.py"  # collected first: the passing tests never report
        first.write_text(
            f"import os\nimport signal\nimport sys\n\n\ndef test_exit():\n    {_ENDINGS[kind]}\n",
            encoding="utf-8",
        )
        planted.update(file="tests/test_aaa_exit.py", line=str(_line_of(first, _ENDINGS[kind])))
    elif kind == "forged-result-log":
        first = tests / "test_aaa_forge.py"
        first.write_text(_FORGED_LOGS, encoding="utf-8")
        planted.update(file="tests/test_aaa_forge.py", line=str(_line_of(first, "os._exit(0)")))
    elif kind == "plugins-disabled":
        makefile = repo / "Makefile"
        text = makefile.read_text(encoding="utf-8")
        if _MAKE_TEST not in text:
            raise ValueError("Makefile: the test recipe to rewrite was not found")
        makefile.write_text(text.replace(_MAKE_TEST, _MAKE_TEST_WITHOUT_GRADER), encoding="utf-8")
        planted.update(file="Makefile", line=str(_line_of(makefile, "PYTEST_ADDOPTS=")))
