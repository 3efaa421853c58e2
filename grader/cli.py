"""`grade TARGET [options]` and `grade checks`: argument parsing, progress lines and exit codes only.

Exit codes: 0 graded; 1 internal error (one line; GRADE_DEBUG=1 shows the traceback); 2 bad input (one line
`grade: error: ...`); 3 graded but the total is below --fail-under; 130 interrupted.

`checks` as the first argument is always the subcommand; to grade a folder named `checks`, write `./checks`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from grader import __version__
from grader.errors import BadInput

__all__ = ["EXIT_BAD_INPUT", "EXIT_BELOW", "EXIT_INTERNAL", "EXIT_OK", "main"]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_BELOW = 3
EXIT_INTERRUPTED = 130

_REPORT_FORMATS = ("text", "markdown", "json")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is the same one line (and exit 2) as every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise BadInput(f"{message} (see {self.prog} --help)")


def _positive(kind: Callable[[str], float], what: str) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{what} must be greater than 0, got {text!r}")
        return value

    return convert


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--fail-under must be a percentage, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"--fail-under must be between 0 and 100, got {text!r}")
    return value


def _grade_parser() -> _Parser:
    parser = _Parser(
        prog="grade",
        description="Grade a cassette take-home: replay it offline in a sandbox and score a rubric.",
        epilog="`grade checks` lists the checks and the facts rubric rows may use. "
        "Exit codes: 0 graded, 2 bad input, 3 below --fail-under, 1 internal error.",
    )
    parser.add_argument("target", help="git URL, local git repo, folder, or .zip/.tar.gz archive")
    parser.add_argument("--rubric", type=Path, help="rubric YAML (default: the bundled default rubric)")
    parser.add_argument("--format", choices=_REPORT_FORMATS, default="text", help="report format (text)")
    parser.add_argument("--output", "-o", type=Path, help="write the report here instead of stdout")
    parser.add_argument(
        "--timeout",
        type=_positive(float, "--timeout"),
        default=300.0,
        help="seconds allowed per command the submission runs (300)",
    )
    parser.add_argument("--keep-workspace", action="store_true", help="keep the temporary checkout and logs")
    parser.add_argument(
        "--fail-under", type=_percent, metavar="PERCENT", help="exit 3 when the total is below PERCENT"
    )
    parser.add_argument(
        "--jobs", "-j", type=_positive(int, "--jobs"), default=1, help="checks run at once (1)"
    )
    parser.add_argument("--cache-dir", type=Path, help="where installed environments are cached")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--version", action="version", version=f"grade {__version__}")
    return parser


def _checks_parser() -> _Parser:
    parser = _Parser(prog="grade checks", description="List every check and the facts rubric rows may use.")
    parser.add_argument("--format", choices=("text", "markdown"), default="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `grade` command; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "checks":
            return _cmd_checks(args[1:])
        return _cmd_grade(args)
    except BadInput as exc:
        _say(f"grade: error: {exc}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("grade: interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("GRADE_DEBUG") == "1":
            traceback.print_exc()
        detail = " ".join(str(exc).split())[:300]
        _say(
            f"grade: internal error: {type(exc).__name__}{': ' + detail if detail else ''} "
            "(set GRADE_DEBUG=1 for the traceback, and please report it)"
        )
        return EXIT_INTERNAL


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _cmd_checks(args: list[str]) -> int:
    from grader.checks import catalogue

    opts = _checks_parser().parse_args(args)
    if Path("checks").exists():
        _say("grade: note: listing the checks; to grade the folder ./checks, run `grade ./checks`")
    sys.stdout.write(catalogue(opts.format))
    return EXIT_OK


def _cmd_grade(args: list[str]) -> int:
    from grader.grading import grade
    from grader.report import render
    from grader.rubric import load_rubric

    opts = _grade_parser().parse_args(args)
    if opts.output is not None:
        # Checked now as well as at write time: a bad path should not cost a whole grading run.
        _check_output(opts.output)
    # Validate the rubric before touching the target: a YAML typo should cost seconds, not a grading run.
    rubric = load_rubric(opts.rubric)
    started = time.monotonic()

    def progress(step: str, seconds: float, message: str) -> None:
        if not opts.quiet:
            _say(f"[{step}] {seconds:.1f}s {message}".rstrip())

    report = grade(
        opts.target,
        rubric=rubric,
        timeout=opts.timeout,
        keep_workspace=opts.keep_workspace,
        cache_root=opts.cache_dir,
        progress=progress,
        jobs=opts.jobs,
    )
    text = render(report, opts.format)
    if opts.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        _write_atomic(opts.output, text)
    total = report["total"]
    if not opts.quiet:
        where = f" -> {opts.output}" if opts.output is not None else ""
        _say(
            f"[done] {time.monotonic() - started:.1f}s {total['points']}/{total['max']} "
            f"({total['percent']}%){where}"
        )
    if opts.fail_under is not None and total["percent"] < opts.fail_under:
        _say(f"grade: total {total['percent']}% is below --fail-under {opts.fail_under:g}%")
        return EXIT_BELOW
    return EXIT_OK


def _check_output(path: Path) -> Path:
    if path.is_dir():
        raise BadInput(f"--output {path} is a directory; give a file path")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise BadInput(f"--output {path}: folder {folder} does not exist; create it first")
    return folder


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same folder + rename, so a reader never sees half a report."""
    folder = _check_output(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
