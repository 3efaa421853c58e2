"""`make check`, the candidate's self-check: passes on a clean recorded repo, names each problem by file:line.

Real parts: the template baked with cookiecutter, sample_solution (the template baked and recorded), real git
repositories and history, `make check` run as a subprocess in a fresh network namespace where allowed.
Keys are assembled at runtime from parts and random characters; none is written literally in this file.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import shutil
import string
import subprocess
from pathlib import Path

import pytest

from grader.checks.replay_doc import replay_doc
from tests.helpers.bake import ROOT, bake, baked_venv, run
from tests.helpers.context import folder_context
from tests.test_detectors import DOC_EMPTY, HONEST_SHAPES

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
        "ok: replay-doc",
    ], output
    assert "ok: replay-doc (REPLAY.md covers 6/6 topics, 0 contradictions)" in lines
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
    # First the suite's own grouped line (the newcomer walk: ten near-identical lines hid the one cause).
    grouped = misses[0]
    assert grouped.startswith("FAIL: offline replay: cassette: ") and "miss(es)" in grouped, grouped
    assert "messages[0].content: whitespace differs" in grouped, grouped
    for line in misses[1:-1]:
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
    tickets = len((project / "data/tickets.jsonl").read_text().splitlines())
    # First the suite's own grouped cause, its ledger named as the repository holds it.
    assert replay[0] == (
        f"FAIL: offline replay: cassette: {tickets} miss(es); no tape is recorded yet; run `make record` "
        "(cassettes/.misses.jsonl)"
    ), replay[0]
    assert re.fullmatch(
        # The miss whole (not cut short), without the exception's class name repeating "cassette miss".
        r"FAIL: offline replay: test_triage_matches_label\[01-refund\]: cassette miss: "
        r"no tape [0-9a-f]{16} for POST /v1/chat/completions \(expected cassettes/[0-9a-f]{16}\.json\); "
        r"no tape is recorded yet; run `make record` \(tests/test_triage\.py:\d+\)",
        replay[1],
    ), replay[1]
    assert replay[-1] == f"FAIL: offline replay: ... and {tickets + 1 - 10} more"

    assert _fails(lines, "tape metadata") == [
        "FAIL: tape metadata: no tapes in cassettes/: run `make record` and commit them (cassettes/)"
    ]
    # The template's REPLAY.md, TODOs and all: make check says what the reviewers' replay-doc row will say,
    # the same count first, then the same findings at the same lines.
    assert _fails(lines, "replay-doc") == [f"FAIL: replay-doc: {line}" for line in _graded(project)], output
    assert "FAIL: replay-doc: REPLAY.md covers 0/6 topics, 0 contradictions (missing: " in output
    assert "ok: no credentials (tree only: no git history to scan)" in lines


def _graded(repo: Path) -> list[str]:
    """The grader's replay-doc check on ``repo`` as make check prints it: the summary, then each finding."""
    result = replay_doc(folder_context(repo))
    return [result.facts["summary"], *(f"{f.message} ({f.location})" for f in result.findings)]


def _previewed(repo: Path) -> list[str]:
    """The baked tools/selfcheck.py's replay-doc check on ``repo`` (its own module, loaded from the file)."""
    spec = importlib.util.spec_from_file_location(f"selfcheck_{repo.name}", repo / "tools" / "selfcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summary, problems = module.check_replay_doc(repo / "cassettes")
    return [summary, *problems]


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


_DOC = (SAMPLE / "REPLAY.md").read_text(encoding="utf-8")
_TEMPLATE_DOC = (ROOT / "template" / "{{cookiecutter.project_slug}}" / "REPLAY.md").read_text(
    encoding="utf-8"
)


def _without_section(doc: str, heading: str) -> str:
    start = doc.index(heading)
    end = doc.find("\n## ", start + 1)
    return doc[:start] + (doc[end + 1 :] if end != -1 else "")


_TODO = "TODO — list any rule you added or removed, and why."
_VARIANTS = {
    "complete": _DOC,
    "a TODO left": _DOC.replace(
        "No rule was added or removed:", f"{_TODO}\n\nNo rule was added or removed:", 1
    ),
    "a section missing": _without_section(_DOC, "## Fields normalized out of the key"),
    "a topic named differently": _DOC.replace("## Recording date", "## When these tapes were made", 1),
    "a heading nobody matches": _DOC.replace("## Recording date", "## History", 1),
    "a field without a reason": _DOC.replace(
        "| `metadata` | dropped |", "| `seed` |\n| `metadata` | dropped |", 1
    ),
    "contradicting the tapes": _DOC.replace(
        "| `user` | dropped |",
        "| `temperature` | dropped | sampling noise, not the question |\n| `user` | dropped |",
    ).replace("## Recording date\n", "## Recording date\n\nFirst tried with gpt-4o.\n", 1),
    # Red-team G10: the production host and another day claimed over stand-in tapes.
    "lying about the host and the date": _DOC.replace(
        _DOC[_DOC.index("- Endpoint host:") : _DOC.index("## Recording date")],
        "- Endpoint host: api.openai.com (the production OpenAI API, recorded with my own key)\n\n",
        1,
    ).replace(
        _DOC[_DOC.index("## Recording date\n\n") + 19 :].split(" (UTC;", 1)[0],
        "All tapes were recorded on 2025-03-14",
        1,
    ),
    "headings with nothing checkable (red-team F10)": DOC_EMPTY,
    **{f"honest, {shape}": doc for shape, doc in HONEST_SHAPES.items()},
    "the template's stub": _TEMPLATE_DOC.split("\n", 1)[1]
    .replace("{{ cookiecutter.default_model }}", "gpt-4o-mini")
    .replace("{{ ", "")
    .replace(" }}", ""),
}


@pytest.mark.parametrize("variant", list(_VARIANTS))
def test_make_check_counts_and_cites_replay_md_as_the_grader_does(variant: str, tmp_path: Path) -> None:
    """make check is the replay-doc row's preview: for the same REPLAY.md, the same count of topics and
    contradictions, the same findings at the same lines (the rule is one data file, tools/replay_doc.json)."""
    repo = Path(shutil.copytree(SAMPLE, tmp_path / "submission", ignore=_IGNORE))
    text = _VARIANTS[variant]
    assert variant == "complete" or text != _DOC
    (repo / "REPLAY.md").write_text(text, encoding="utf-8")

    graded = _graded(repo)
    assert _previewed(repo) == graded

    summary, problems = graded[0], graded[1:]
    if variant in ("complete", "a topic named differently", "a heading nobody matches") or variant.startswith(
        "honest, "
    ):
        assert (summary, problems) == ("REPLAY.md covers 6/6 topics, 0 contradictions", [])
    elif variant == "lying about the host and the date":
        assert summary == "REPLAY.md covers 6/6 topics, 2 contradictions"
        host, day = problems
        assert host.startswith(
            "names endpoint host api.openai.com, but the tapes were recorded against 127.0.0.1"
        )
        assert host.endswith(f"(REPLAY.md:{_line_of(text, 'Endpoint host: api.openai.com')})")
        assert day.startswith("says the tapes were recorded on 2025-03-14, but they were recorded on ")
        assert day.endswith(f"(REPLAY.md:{_line_of(text, 'recorded on 2025-03-14')})")
    elif variant == "headings with nothing checkable (red-team F10)":
        # make check fails it, each topic at its heading with what it lacks, as the reviewers' row does.
        assert summary.startswith(
            "REPLAY.md covers 0/6 topics, 0 contradictions (without substance: endpoint at"
        )
        assert problems[:2] == [
            f"does not cover endpoint: no host, URL or API path (REPLAY.md:{_line_of(text, '## Endpoint')})",
            f"does not cover model: no model name (REPLAY.md:{_line_of(text, '## Model')})",
        ]
        assert len(problems) == 6
    elif variant == "a TODO left":
        line = _line_of(text, _TODO)
        assert summary == "REPLAY.md covers 5/6 topics, 0 contradictions (missing: normalized fields)"
        assert problems == [
            "does not cover normalized fields: its section still holds unfilled text (TODO, TBD, FIXME or "
            f"<fill ...>) (REPLAY.md:{line})"
        ]
    elif variant == "a section missing":
        assert summary == "REPLAY.md covers 5/6 topics, 0 contradictions (missing: normalized fields)"
        assert problems == [
            "does not cover normalized fields: no heading or filled-in line names it (REPLAY.md:1)"
        ]
    elif variant == "a field without a reason":
        line = _line_of(text, "## Fields normalized out of the key")
        assert summary == "REPLAY.md covers 5/6 topics, 0 contradictions (missing: normalized fields)"
        assert problems == [
            f"does not cover normalized fields: seed listed without a reason (REPLAY.md:{line})"
        ]
    elif variant == "contradicting the tapes":
        assert summary == "REPLAY.md covers 6/6 topics, 2 contradictions"
        assert problems[0].startswith("says `temperature` is dropped, but cassettes/")
        assert problems[0].endswith(f"(REPLAY.md:{_line_of(text, '| `temperature` | dropped |')})")
        assert (
            problems[1]
            == f"names model gpt-4o, which no tape carries (REPLAY.md:{_line_of(text, 'gpt-4o.')})"
        )
    else:
        assert summary.startswith("REPLAY.md covers 0/6 topics")
        assert all(re.search(r"\(REPLAY\.md:\d+\)$", p) for p in problems) and len(problems) == 6
        # Each at the first TODO of the section meant for it, not at the intro under the `#` title ("... its
        # model calls", whose "Fill in every `TODO`" is no place to write the model).
        served = _line_of(text, "Served model: TODO")
        assert problems[:2] == [
            f"does not cover {topic}: its section still holds unfilled text (TODO, TBD, FIXME or <fill ...>) "
            f"(REPLAY.md:{served})"
            for topic in ("endpoint", "model")
        ]


def test_the_rule_file_is_one_file_in_three_places() -> None:
    """The grader reads grader/rules/replay_doc.json; the template and the sample carry byte copies."""
    rule = (ROOT / "grader" / "rules" / "replay_doc.json").read_bytes()
    assert (
        ROOT / "template" / "{{cookiecutter.project_slug}}" / "tools" / "replay_doc.json"
    ).read_bytes() == rule
    assert (SAMPLE / "tools" / "replay_doc.json").read_bytes() == rule


def test_make_check_finds_replay_md_where_the_grader_does(tmp_path: Path) -> None:
    repo = Path(shutil.copytree(SAMPLE, tmp_path / "submission", ignore=_IGNORE))
    (repo / "REPLAY.md").rename(repo / "docs-replay.tmp")
    (repo / "docs").mkdir(exist_ok=True)
    (repo / "docs-replay.tmp").rename(repo / "docs" / "Replay.md")
    assert _previewed(repo) == _graded(repo) == ["docs/Replay.md covers 6/6 topics, 0 contradictions"]
    (repo / "docs" / "Replay.md").unlink()
    (repo / "REPLAY.md").symlink_to("README.md")
    assert _previewed(repo)[1:] == _graded(repo)[1:] == ["REPLAY.md is a symlink; not read (REPLAY.md:1)"]
    (repo / "REPLAY.md").unlink()
    assert (
        _previewed(repo)[1:] == _graded(repo)[1:] == ["no REPLAY.md in the repo root or docs/ (REPLAY.md:1)"]
    )


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
