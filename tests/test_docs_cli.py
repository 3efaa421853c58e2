"""The docs and the command line agree: every option, format and exit code the docs name exists, and every
one that exists is documented; `grade --help` lists every command; one spelling per option everywhere.

Options are read from the real parsers; the commands run as `python -m grader` subprocesses.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader import cli
from grader._cliargs import Parser
from grader.report import FORMATS
from grader.selftest import command as selftest
from tests.test_batch import run_grade

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REVIEWER = (DOCS / "reviewer.md").read_text(encoding="utf-8")

PARSERS: dict[str, Parser] = {
    "grade": cli._grade_parser(),
    "grade checks": cli._checks_parser(),
    "grade batch": cli._batch_parser(),
    "grade merge": cli._merge_parser(),
    "grade rescore": cli._rescore_parser(),
    "grade --selftest": selftest._parser(),
    "grade drift": cli._drift_parser(),
}
_HIDDEN = {"--help"}  # argparse's own


def options(parser: Parser) -> set[str]:
    return {
        name
        for action in parser._actions
        for name in action.option_strings
        if name.startswith("--") and name not in _HIDDEN
    }


def usage_block() -> dict[str, set[str]]:
    """Command -> the options the reviewer guide's usage block shows for it."""
    block = REVIEWER[
        REVIEWER.index("```sh\ngrade TARGET") : REVIEWER.index(
            "```\n", REVIEWER.index("```sh\ngrade TARGET") + 5
        )
    ]
    shown: dict[str, set[str]] = {}
    command = ""
    for line in block.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("grade "):
            words = stripped.split()
            command = "grade" if words[1] == "TARGET" else f"grade {words[1]}"
            shown.setdefault(command, set())
        shown[command] |= set(re.findall(r"--[a-z][a-z-]*", stripped)) - {command.split()[-1]}
    return shown


def test_usage_block_shows_every_option_of_every_command_and_no_other() -> None:
    shown = usage_block()
    assert set(shown) == set(PARSERS)
    for command, parser in PARSERS.items():
        assert shown[command] == options(parser), command


def test_every_option_of_grade_has_a_row_in_the_options_table() -> None:
    table = REVIEWER[REVIEWER.index("| option | meaning |") : REVIEWER.index("Progress goes to stderr")]
    documented = set(re.findall(r"^\| `(--[a-z-]+)", table, flags=re.M))
    assert documented == options(PARSERS["grade"]) - {"--help"}


def short_flags(parser: Parser) -> dict[str, str]:
    """Short flag -> the long option it stands for."""
    pairs = {}
    for action in parser._actions:
        longs = [name for name in action.option_strings if name.startswith("--")]
        for name in action.option_strings:
            if not name.startswith("--"):
                pairs[name] = longs[0]
    return pairs


def test_every_short_flag_of_grade_is_in_its_options_table_row() -> None:
    table = REVIEWER[REVIEWER.index("| option | meaning |") : REVIEWER.index("Progress goes to stderr")]
    shown = {}
    for row in re.findall(r"^\| (`--[^|]*)\|", table, flags=re.M):
        long = re.match(r"`(--[a-z-]+)", row).group(1)
        shown.update({short: long for short in re.findall(r"`(-[a-z])`", row)})
    assert shown == {s: long for s, long in short_flags(PARSERS["grade"]).items() if s != "-h"}


def test_every_short_flag_of_every_command_is_documented_and_no_other() -> None:
    """The guide's one sentence on short flags covers every command, and names none that does not exist."""
    sentence = " ".join(REVIEWER[REVIEWER.index("Short flags, ") :].split(".\n", 1)[0].split())
    documented = dict(re.findall(r"`(-[a-z])` for `(--[a-z-]+)`", sentence))
    existing: dict[str, str] = {}
    for command, parser in PARSERS.items():
        for short, long in short_flags(parser).items():
            assert existing.setdefault(short, long) == long, (command, short)  # one meaning everywhere
    assert documented == existing
    # "in every command that has the long option": no command has the long option without the short one.
    for command, parser in PARSERS.items():
        for short, long in existing.items():
            assert (long in options(parser) or long == "--help") == (short in short_flags(parser)), (
                command,
                short,
            )


def _doc_commands() -> list[tuple[Path, str, str]]:
    """(file, command, text) for every `grade ...` command written in a code span or a code block."""
    found = []
    for path in [*DOCS.glob("*.md"), ROOT / "README.md", *DOCS.glob("examples/*.yml")]:
        text = path.read_text(encoding="utf-8")
        pieces = re.findall(r"`([^`\n]*)`", text) + [line for line in text.splitlines() if "grade " in line]
        for piece in pieces:
            commands = r"\bgrade((?: (?:batch|merge|rescore|checks|drift))?)\b([^`#|;&]*)"
            for match in re.finditer(commands, piece):
                sub = match.group(1).strip()
                rest = match.group(2)
                command = f"grade {sub}" if sub else ("grade --selftest" if "--selftest" in rest else "grade")
                found.append((path, command, rest))
    return found


def test_every_option_the_docs_use_exists() -> None:
    problems = []
    for path, command, text in _doc_commands():
        for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", text):
            if option in cli.DEPRECATED and "deprecated" in text + path.read_text():
                continue
            if option not in options(PARSERS[command]) | {"--help", "--selftest", "--version"}:
                problems.append(f"{path.name}: `{command} ... {option}`")
    assert not problems, problems


def test_every_format_is_documented_and_no_other() -> None:
    row = next(line for line in REVIEWER.splitlines() if line.startswith("| `--format` |"))
    assert set(re.findall(r"`([a-z]+)` \(", row)) == set(FORMATS)
    readme = (ROOT / "README.md").read_text()
    assert all(fmt in readme for fmt in FORMATS)


def test_exit_code_table_is_every_code_the_commands_use() -> None:
    section = REVIEWER[REVIEWER.index("## Exit codes") : REVIEWER.index("## Grading many candidates")]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", section, flags=re.M)}
    used = {
        value for name, value in vars(cli).items() if name.startswith("EXIT_") and isinstance(value, int)
    } | {selftest.EXIT_FAILED, selftest.EXIT_OK}
    assert documented == used
    # Each command's --help names only codes in the table.
    for command, parser in PARSERS.items():
        for code in re.findall(r"\b(\d+) [a-z]", (parser.epilog or "").split("xit codes:")[-1]):
            assert int(code) in documented, (command, code)


def test_help_lists_every_command_one_line_each(tmp_path: Path) -> None:
    done = run_grade(["--help"], cwd=tmp_path)
    assert done.returncode == 0
    listed = done.stdout[done.stdout.index("commands") :]
    for command in (
        "grade TARGET",
        "grade batch FILE",
        "grade merge OUT SHARD_DIR...",
        "grade rescore RUN_DIR",
    ):
        assert sum(1 for line in listed.splitlines() if line.strip().startswith(command + " ")) == 1, command
    assert re.search(r"^  grade checks +\S", listed, flags=re.M)
    assert re.search(r"^  grade --selftest +\S", listed, flags=re.M)
    assert re.search(r"^  grade drift TARGET +\S", listed, flags=re.M)
    for sub in ("batch", "merge", "rescore", "checks", "drift"):
        assert run_grade([sub, "--help"], cwd=tmp_path).returncode == 0, sub


@pytest.mark.parametrize("spelling", [["--out", "{out}"], ["--out={out}"]])
def test_old_batch_out_spelling_still_works_with_one_note(tmp_path: Path, spelling: list[str]) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("# nothing here\n")
    out = tmp_path / "o"
    done = run_grade(["batch", str(listing), *(s.format(out=out) for s in spelling)], cwd=tmp_path)
    lines = done.stderr.splitlines()
    assert lines[0] == "grade batch: note: --out is deprecated; use --output"
    # The option was taken (the error is about the file, not about an unknown option).
    assert done.returncode == 2 and lines[1].startswith("grade: error: ") and "no targets" in lines[1]
    assert len(lines) == 2


def test_the_same_option_has_the_same_spelling_in_every_command() -> None:
    meanings = {
        "--output": {"grade", "grade batch", "grade drift"},
        "--cache-dir": {"grade", "grade batch", "grade --selftest", "grade drift"},
    }
    for option, commands in meanings.items():
        assert {c for c, p in PARSERS.items() if option in options(p)} == commands
    for parser in PARSERS.values():
        assert not options(parser) & set(cli.DEPRECATED)


def test_every_option_and_format_of_grade_drift_is_in_the_hiring_team_guide() -> None:
    from grader.drift_report.render import FORMATS as DRIFT_FORMATS

    guide = (DOCS / "hiring-team.md").read_text(encoding="utf-8")
    table = guide[guide.index("| option | meaning |") : guide.index("### Where the arms run")]
    assert set(re.findall(r"^\| `(--[a-z-]+)", table, flags=re.M)) == options(PARSERS["grade drift"])
    row = next(line for line in table.splitlines() if line.startswith("| `--format` |"))
    assert set(re.findall(r"`([a-z]+)` \(", row)) == set(DRIFT_FORMATS)


# Debian's system Python is `python3` only, and refuses `pip install` outside a venv (PEP 668).
_SETUP_DOCS = [
    ROOT / "README.md",
    *sorted(DOCS.glob("*.md")),
    *sorted((DOCS / "examples").glob("*.yml")),
    ROOT / "template" / "{{cookiecutter.project_slug}}" / "README.md",
    ROOT / "sample_solution" / "README.md",
]


@pytest.mark.parametrize("path", _SETUP_DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_setup_steps_work_where_only_python3_exists(path: Path) -> None:
    wrong = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if re.search(r"(?<![\w/])python -m venv", line):
            wrong.append(f"{number}: `python -m venv` (Debian has only python3)")
        # A command that starts with a bare pip, not the venv's own (`.venv/bin/pip`) nor after `activate &&`.
        for command in re.split(r"&&|;|\|", line):
            if re.match(r"\s*`?\$?\s*pip3? install", command) and "activate" not in line:
                wrong.append(f"{number}: bare `pip install` (outside a venv, PEP 668 refuses it)")
    assert not wrong, f"{path.relative_to(ROOT)}: " + "; ".join(wrong)
