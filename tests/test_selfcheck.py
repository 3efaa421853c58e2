"""`make check`, the candidate's self-check: passes on a clean recorded repo, names each problem by file:line.

Real parts: the template baked with cookiecutter, sample_solution (the template baked and recorded), real git
repositories and history, `make check` run as a subprocess in a fresh network namespace where allowed.
Keys are assembled at runtime from parts and random characters; none is written literally in this file.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import string
import subprocess
from pathlib import Path

import pytest

from tests.helpers.bake import ROOT, bake, baked_venv, run

pytestmark = [pytest.mark.slow, pytest.mark.index]

SAMPLE = ROOT / "sample_solution"
_IGNORE = shutil.ignore_patterns(".ruff_cache", ".pytest_cache", "__pycache__", "*.misses.jsonl", ".venv")
_GIT_USER = ["-c", "user.name=Candidate", "-c", "user.email=candidate@example.invalid"]


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", *_GIT_USER, *args], cwd=repo, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def _commit_all(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A copy of sample_solution (the template baked, completed and recorded) as a fresh git repository."""
    repo = tmp_path / "submission"
    shutil.copytree(SAMPLE, repo, ignore=_IGNORE)
    _git(repo, "init", "-q", "-b", "main")
    _commit_all(repo, "submission")
    return repo


def _check(repo: Path, **env: str) -> tuple[int, list[str], str]:
    result = run(["make", "-s", "check"], repo, baked_venv().env(**env), offline=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith(("ok: ", "FAIL: "))]
    return result.returncode, lines, result.stdout + result.stderr


def _fails(lines: list[str], check: str) -> list[str]:
    return [line for line in lines if line.startswith(f"FAIL: {check}: ")]


def _rand(alphabet: str, n: int, rng: random.Random) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _keys() -> dict[str, str]:
    """One realistically shaped key per format the self-check knows, built at runtime (seeded, random)."""
    rng = random.Random(7)
    alnum = string.ascii_letters + string.digits
    b64url = alnum + "-_"
    return {
        "OpenAI API key": "sk-" + "proj-" + _rand(alnum, 80, rng),
        "Anthropic API key": "sk-" + "ant-" + "api03-" + _rand(b64url, 93, rng) + "AA",
        "OpenRouter API key": "sk-" + "or-v1-" + _rand("0123456789abcdef", 64, rng),
        "Google API key": "AI" + "za" + _rand(b64url, 35, rng),
        "AWS access key id": "AK" + "IA" + _rand(string.ascii_uppercase + "234567", 16, rng),
        "GitHub token": "gh" + "p_" + _rand(alnum, 36, rng),
        "Hugging Face token": "hf" + "_" + _rand(string.ascii_letters, 34, rng),
        "Groq API key": "gs" + "k_" + _rand(alnum, 52, rng),
    }


def test_passes_on_a_clean_recorded_repo(recorded: Path) -> None:
    code, lines, output = _check(recorded)
    assert code == 0, output
    assert [line.split(" (")[0] for line in lines] == [
        "ok: offline replay",
        "ok: no credentials",
        "ok: tape metadata",
        "ok: tape chain",
        "ok: REPLAY.md sections",
    ], output
    tapes = len(list((recorded / "cassettes").glob("*.json")))
    # Recorded against the stand-in on purpose: make check says the grader's default rubric caps that at 2/3.
    assert (
        f"ok: tape metadata ({tapes} tapes; {tapes} recorded against a loopback endpoint: reviewers' default "
        "rubric gives at most 2/3)" in lines
    ), lines
    assert "ok: no credentials (tree and history)" in lines
    assert f"ok: tape chain ({tapes} tapes, head " in "\n".join(lines)
    assert re.fullmatch(r"ok: offline replay \(\d+ passed in [\d.]+s\)", lines[0]), lines[0]


def test_a_miss_line_names_the_whole_nearest_tape_and_what_differs(recorded: Path) -> None:
    """A one-space prompt change: each FAIL line names the nearest recorded tape in full (a file one can open)
    and the field that differs, as the cassette layer's own miss message does (issue #16)."""
    agent = recorded / "support_triage_agent" / "agent.py"
    text = agent.read_text()
    assert "You triage customer" in text
    agent.write_text(text.replace("You triage customer", "You triage  customer", 1))

    code, lines, output = _check(recorded)

    assert code != 0
    misses = _fails(lines, "offline replay")
    assert misses and misses[-1].startswith("FAIL: offline replay: ... and "), output
    tapes = {p.name for p in (recorded / "cassettes").glob("*.json")}
    for line in misses[:-1]:
        nearest = re.search(
            r"nearest recorded: cassettes/([0-9a-f]+\.json) differs in (.+?); run `make record`", line
        )
        assert nearest, line
        assert nearest.group(1) in tapes, line  # the whole name: the file exists
        assert nearest.group(2) == "messages[0].content: whitespace differs", line
        assert (
            line.startswith("FAIL: offline replay: test_triage_matches_label[")
            and ": cassette miss: no tape " in line
        )
        assert re.search(r"\(tests/test_triage\.py:\d+\)$", line), line


def test_make_help_lists_check_and_the_readme_mentions_it(tmp_path: Path) -> None:
    project = bake(tmp_path, project_name="Help Triage")
    result = run(["make", "-s", "help"], project, baked_venv().env())
    assert result.returncode == 0, result.stderr
    assert re.search(r"^check\t\S", result.stdout, re.MULTILINE), result.stdout
    assert "make check" in (project / "README.md").read_text()


def test_a_tape_without_metadata_fails_naming_the_tape(recorded: Path) -> None:
    tapes = sorted((recorded / "cassettes").glob("*.json"))
    no_time, no_meta = tapes[0], tapes[1]
    tape = json.loads(no_time.read_text())
    del tape["meta"]["recorded_at"]
    tape["meta"]["endpoint"] = " "
    no_time.write_text(json.dumps(tape, indent=2, sort_keys=True) + "\n")
    tape = json.loads(no_meta.read_text())
    del tape["meta"]
    no_meta.write_text(json.dumps(tape, indent=2, sort_keys=True) + "\n")

    code, lines, output = _check(recorded)
    assert code != 0
    meta_line = next(n for n, s in enumerate(no_time.read_text().splitlines(), 1) if '"meta"' in s)
    assert sorted(_fails(lines, "tape metadata")) == sorted(
        [
            f"FAIL: tape metadata: no meta.endpoint, meta.recorded_at (cassettes/{no_time.name}:{meta_line})",
            "FAIL: tape metadata: no meta.model, meta.endpoint, meta.recorded_at "
            f"(cassettes/{no_meta.name}:1)",
        ]
    ), output
    # The other checks still report on their own: the tapes still replay.
    assert "ok: no credentials (tree and history)" in lines
    assert any(line.startswith("ok: offline replay") for line in lines), output


def test_a_fresh_bake_lists_what_is_left_to_do(tmp_path: Path) -> None:
    project = bake(tmp_path, project_name="Fresh Triage")
    code, lines, output = _check(project)
    assert code != 0
    assert "Traceback" not in output

    replay = _fails(lines, "offline replay")
    assert replay, output
    assert re.fullmatch(
        # The miss whole (not cut short), without the exception's class name repeating "cassette miss".
        r"FAIL: offline replay: test_triage_matches_label\[01-refund\]: cassette miss: "
        r"no tape [0-9a-f]{16} for POST /v1/chat/completions \(expected cassettes/[0-9a-f]{16}\.json\); "
        r"no tape is recorded yet; run `make record` \(tests/test_triage\.py:\d+\)",
        replay[0],
    ), replay[0]
    tickets = len((project / "data/tickets.jsonl").read_text().splitlines())
    assert replay[-1] == f"FAIL: offline replay: ... and {tickets - 10} more"

    assert _fails(lines, "tape metadata") == [
        "FAIL: tape metadata: no tapes in cassettes/: run `make record` and commit them (cassettes/)"
    ]
    doc = (project / "REPLAY.md").read_text().splitlines()
    first_section = next(n for n, s in enumerate(doc, 1) if s.startswith("## "))
    todo_lines = [n for n, s in enumerate(doc, 1) if "TODO" in s and n > first_section]
    doc_fails = "\n".join(_fails(lines, "REPLAY.md sections"))
    reported = [int(m) for m in re.findall(r"\(REPLAY\.md:(\d+)\)", doc_fails)]
    assert reported == todo_lines and todo_lines, output
    assert 'FAIL: REPLAY.md sections: TODO left in "Recording date"' in output
    assert "ok: no credentials (tree only: no git history to scan)" in lines


def test_a_missing_replay_section_is_named(recorded: Path) -> None:
    doc = recorded / "REPLAY.md"
    doc.write_text(doc.read_text().replace("## Recording date", "## When"))
    code, lines, output = _check(recorded)
    assert code != 0
    assert _fails(lines, "REPLAY.md sections") == [
        'FAIL: REPLAY.md sections: no "## Recording date" section (REPLAY.md:1)'
    ], output


def test_a_key_removed_from_the_tree_is_still_found_in_history(recorded: Path) -> None:
    key = _keys()["Anthropic API key"]
    (recorded / "notes.txt").write_text(f"first try\nANTHROPIC_API_KEY={key}\n")
    introduced = _commit_all(recorded, "notes")
    (recorded / "notes.txt").unlink()
    _commit_all(recorded, "remove the key")

    code, lines, output = _check(recorded)
    assert code != 0
    assert _fails(lines, "no credentials") == [
        f"FAIL: no credentials: Anthropic API key added in commit {introduced[:7]}: "
        "revoke it, then rewrite history (notes.txt:2)"
    ], output
    assert key not in output and key[:20] not in output


def test_every_key_format_in_the_tree_is_named_by_line_and_placeholders_are_not(recorded: Path) -> None:
    keys = _keys()
    rng = random.Random(11)
    header_value = _rand(string.ascii_letters + string.digits, 40, rng)
    lines_written = [f"{name.upper().replace(' ', '_')}={key}" for name, key in keys.items()]
    lines_written += [
        "OPENAI_API_KEY=sk-...",
        '"authorization": "Bearer [REDACTED]"',
        "x-api-key: dummy-key-0000000000000000",
        "sk-" + "proj-YOUR_KEY_HERE_0123456789abcdefghij",
        "task-" + _rand(string.ascii_letters + string.digits, 48, rng),  # `sk-` inside a word
        "sk-" + "this-is-a-long-kebab-case-identifier-in-prose",  # lowercase words, not a key
    ]
    (recorded / "config.txt").write_text("\n".join(lines_written) + "\n")  # untracked: would be submitted
    tape = recorded / "cassettes" / "recorded-elsewhere.yaml"
    tape.write_text(f"request:\n  headers:\n    Authorization: Bearer {header_value}\n")
    (recorded / ".env").write_text(f"OPENAI_API_KEY={keys['OpenAI API key']}\n")  # gitignored: stays private

    code, lines, output = _check(recorded)
    assert code != 0
    expected = [f"FAIL: no credentials: {name} (config.txt:{n})" for n, name in enumerate(keys, 1)]
    expected.append("FAIL: no credentials: credential header (cassettes/recorded-elsewhere.yaml:3)")
    assert sorted(_fails(lines, "no credentials")) == sorted(expected), output
    for secret in [*keys.values(), header_value]:
        assert secret not in output


def test_replay_blocks_sockets_and_unsets_credentials_even_without_the_conftest(recorded: Path) -> None:
    # The candidate removed the template's offline fixture: the self-check itself must still isolate the run.
    (recorded / "tests/conftest.py").write_text('"""No fixtures."""\n')
    (recorded / "tests/test_isolation.py").write_text(
        "import os\nimport socket\n\n\n"
        "def test_no_credentials_in_the_environment():\n"
        "    assert 'OPENAI_API_KEY' not in os.environ\n\n\n"
        "def test_reaches_the_network():\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
    )
    key = _keys()["OpenAI API key"]
    code, lines, output = _check(recorded, OPENAI_API_KEY=key)
    assert code != 0
    failures = _fails(lines, "offline replay")
    assert len(failures) == 1, output  # the environment test passed: the key was unset
    assert re.fullmatch(
        r"FAIL: offline replay: test_reaches_the_network: "
        r"SocketBlockedError: A test tried to use socket\.\w+\. \(tests/test_isolation\.py:9\)",
        failures[0],
    ), output
    assert key not in output
