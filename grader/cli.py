"""`grade TARGET [options]` and its sub-commands (checks, batch, merge, rescore, --selftest): argument
parsing, progress lines and exit codes only.

Exit codes: 0 graded; 1 internal error (one line; GRADE_DEBUG=1 shows the traceback); 2 bad input (one line
`grade: error: ...`); 3 graded but the total is below --fail-under; 4 not assessable: the grader's own
environment failed before anything could be graded (no space for the workspace; one line
`grade: not assessable: ...`); 130 interrupted. With 1 and 4 a report is still written (every row
not-assessable with the reason) to --output in any format, or on stdout (1: --format json only).

`checks` as the first argument is always the subcommand; to grade a folder named `checks`, write `./checks`
(and so for `batch`, `merge`, `rescore` and `drift`). `grade drift` exits 0 when the candidate model meets
the acceptance rule, 3 when it does not, 2, 4, 1 and 130 as above.
`grade --selftest [--rubric PATH]` grades the calibration corpus instead (grader/selftest): exit 0 when
every case lands in its bands, 3 naming the cases that do not, 2 on bad input. `batch`, `merge` and `rescore`
exit 0 or 2 (and 1, 130 as above). docs/reviewer.md has the one table of them all.
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
from typing import TYPE_CHECKING

from grader import __version__
from grader._cliargs import Parser, positive
from grader.acquire import redact
from grader.batch import default_out, parse_shard, read_batch_file, run_batch
from grader.checks import catalogue
from grader.errors import BadInput, NotAssessable, describe
from grader.grading import grade, unassessed_report
from grader.inert import inert
from grader.merge import merge_shards
from grader.progress import Display, make_display
from grader.report import FORMATS, render
from grader.rescore import rescore
from grader.rubric import load_rubric
from grader.runstore import check_store_folder, store_failure
from grader.selftest.command import main as selftest

if TYPE_CHECKING:
    from grader.rubric import Rubric

__all__ = ["EXIT_BAD_INPUT", "EXIT_BELOW", "EXIT_INTERNAL", "EXIT_NOT_ASSESSABLE", "EXIT_OK", "main"]

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_BELOW = 3
EXIT_NOT_ASSESSABLE = 4
EXIT_INTERRUPTED = 130


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--fail-under must be a percentage, got {text!r}") from None
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"--fail-under must be between 0 and 100, got {text!r}")
    return value


# `grade --help` lists every command, one line each (the commands' own --help has the rest).
COMMANDS = (
    ("grade TARGET", "grade one submission (a git URL, repository, folder or archive): the options above"),
    ("grade batch FILE", "grade every candidate in FILE into one folder with summary.csv/summary.md"),
    ("grade merge OUT SHARD_DIR...", "gather the folders of `grade batch --shard I/N` into one batch folder"),
    ("grade rescore RUN_DIR", "score stored runs again under a new rubric, from stored facts (runs no code)"),
    ("grade checks", "list the checks and the facts rubric rows may use"),
    (
        "grade drift TARGET",
        "re-record TARGET's inputs against a control and a candidate model; report what changes and "
        "whether the acceptance rule holds (exit 3 when it does not)",
    ),
    ("grade --selftest", "grade the calibration corpus with a rubric (exit 3 when a case is out of band)"),
)
# Old option spellings still accepted, with a one-line note on stderr: one spelling per meaning everywhere.
DEPRECATED = {"--out": "--output"}


def _commands_epilog() -> str:
    width = max(len(name) for name, _ in COMMANDS)
    lines = ["commands (each has its own --help):"]
    lines += [f"  {name.ljust(width)}  {what}" for name, what in COMMANDS]
    lines.append("")
    lines.append(
        "exit codes: 0 graded, 1 internal error, 2 bad input, 3 below --fail-under (--selftest: a case "
        "out of band; drift: the acceptance rule does not hold), "
        "4 not assessable (the grader's own environment failed, e.g. no disk space), "
        "130 interrupted"
    )
    return "\n".join(lines)


def _grade_parser() -> Parser:

    parser = Parser(
        prog="grade",
        deprecated=DEPRECATED,
        usage="grade TARGET [options]\n       grade {batch,merge,rescore,checks} ... | grade --selftest ...",
        description="Grade a cassette take-home: replay it offline in a sandbox and score a rubric.",
        epilog=_commands_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", help="git URL, local git repo, folder, or .zip/.tar.gz archive")
    parser.add_argument("--rubric", type=Path, help="rubric YAML (default: the bundled default rubric)")
    parser.add_argument("--format", choices=FORMATS, default="text", help="report format (text)")
    parser.add_argument("--output", "-o", type=Path, help="write the report here instead of stdout")
    parser.add_argument(
        "--timeout",
        type=positive(float, "--timeout"),
        default=300.0,
        help="seconds allowed per command the submission runs (300)",
    )
    parser.add_argument(
        "--budget",
        type=positive(float, "--budget"),
        metavar="SECONDS",
        help="seconds the whole grade may take (4 x --timeout); rows it leaves unassessed are named in the "
        "report's notes",
    )
    parser.add_argument("--keep-workspace", action="store_true", help="keep the temporary checkout and logs")
    parser.add_argument(
        "--fail-under", type=_percent, metavar="PERCENT", help="exit 3 when the total is below PERCENT"
    )
    parser.add_argument(
        "--jobs",
        "-j",
        type=positive(int, "--jobs"),
        default=2,
        help="checks run at once after the replay suite (2: the canary and loud-miss probes start with the "
        "replay suite and overlap it and the other checks; 1 runs everything one after another)",
    )
    parser.add_argument("--cache-dir", type=Path, help="where installed environments are cached")
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors on stderr")
    parser.add_argument(
        "--store",
        type=Path,
        metavar="DIR",
        help="keep the run (reports, facts, raw logs) in the new folder DIR",
    )
    parser.add_argument("--version", action="version", version=f"grade {__version__}")
    return parser


def _checks_parser() -> Parser:
    parser = Parser(prog="grade checks", description="List every check and the facts rubric rows may use.")
    parser.add_argument("--format", choices=("text", "markdown"), default="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `grade` command; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "checks":
            return _cmd_checks(args[1:])
        if args and args[0] == "batch":
            return _cmd_batch(args[1:])
        if args and args[0] == "rescore":
            return _cmd_rescore(args[1:])
        if args and args[0] == "merge":
            return _cmd_merge(args[1:])
        if args and args[0] == "drift":
            return _cmd_drift(args[1:])
        if "--selftest" in args:
            return selftest([a for a in args if a != "--selftest"])
        return _cmd_grade(args)
    except BadInput as exc:
        for line in exc.problems or (str(exc),):
            _say(f"grade: error: {line}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("grade: interrupted")
        return EXIT_INTERRUPTED
    except NotAssessable as exc:  # the grader's own environment (a full output disk), not a bug
        _say(f"grade: not assessable: {exc.reason}")
        return EXIT_NOT_ASSESSABLE
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

    # Error lines quote paths and archive member names the submission chose: nothing in them may act.
    print(inert(line), file=sys.stderr, flush=True)


def _cmd_checks(args: list[str]) -> int:

    opts = _checks_parser().parse_args(args)
    if Path("checks").exists():
        _say("grade: note: listing the checks; to grade the folder ./checks, run `grade ./checks`")
    sys.stdout.write(catalogue(opts.format))
    return EXIT_OK


def _cmd_grade(args: list[str]) -> int:

    opts = _grade_parser().parse_args(args)
    if opts.output is not None:
        # Checked now as well as at write time: a bad path should not cost a whole grading run.
        _check_output(opts.output)
    # Validate the rubric before touching the target: a YAML typo should cost seconds, not a grading run.
    rubric = load_rubric(opts.rubric)
    if opts.store is not None:
        check_store_folder(opts.store)
    started = time.monotonic()
    display, progress = _open_display(opts.quiet, 2 + len({row.check for row in rubric.rows}))
    try:
        try:
            report = grade(
                opts.target,
                rubric=rubric,
                timeout=opts.timeout,
                budget=opts.budget,
                keep_workspace=opts.keep_workspace,
                cache_root=opts.cache_dir,
                progress=progress,
                jobs=opts.jobs,
                store=opts.store,
            )
        finally:
            display.close()
    except (BadInput, KeyboardInterrupt):
        raise
    except NotAssessable as exc:
        # The grader's environment failed (no disk): a report of not-assessable rows, and exit 4, not 2.
        reason = " ".join(str(exc.reason).split())
        _fallback_report(opts, rubric, reason, stdout=True)
        _say(f"grade: not assessable: {reason}")
        return EXIT_NOT_ASSESSABLE
    except Exception as exc:
        # main() prints the one line and exits 1; automation still gets a report to read.
        _fallback_report(opts, rubric, f"internal error in the grader: {describe(exc)}", stdout=False)
        raise
    _deliver(opts.output, render(report, opts.format))
    total = report["total"]
    if not opts.quiet:
        _say(
            f"[done] {time.monotonic() - started:.1f}s {total['points']}/{total['max']} "
            f"({total['percent']}%){_where(opts.output)}"
        )
    if opts.fail_under is not None and total["percent"] < opts.fail_under:
        _say(f"grade: total {total['percent']}% is below --fail-under {opts.fail_under:g}%")
        return EXIT_BELOW
    return EXIT_OK


def _open_display(quiet: bool, steps: int) -> tuple[Display, Callable[[str, float, str], None]]:
    """A display started for one target of ``steps`` steps, and the progress callback that feeds it."""

    display = make_display(quiet=quiet)
    display.start("", steps)

    def progress(step: str, seconds: float, message: str) -> None:
        display.step("", step, seconds, message)

    return display, progress


def _deliver(output: Path | None, text: str) -> None:
    """The report to --output (written atomically) or, without it, to stdout."""

    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        _write_atomic(output, text)


def _where(output: Path | None) -> str:
    return f" -> {output}" if output is not None else ""


def _fallback_report(opts: argparse.Namespace, rubric: Rubric, reason: str, *, stdout: bool) -> None:
    """Write a report whose rows are all not-assessable with ``reason`` (and --store's run.json).

    To --output in the chosen format; on stdout only when ``stdout`` or the format is json. Never raises:
    this runs while something already went wrong, and the one-line message must still be printed.
    """

    try:
        text = render(unassessed_report(opts.target, rubric, reason), opts.format)
        if opts.output is not None:
            _write_atomic(opts.output, text)
        elif stdout or opts.format == "json":
            sys.stdout.write(text)
            sys.stdout.flush()
    except Exception as exc:  # the caller's message is the one that matters
        _say(f"grade: note: no report written: {describe(exc)}")
    if opts.store is not None:
        try:
            store_failure(opts.store, target=redact(opts.target), reason=reason)
        except Exception as exc:
            _say(f"grade: note: run not stored in {opts.store}: {describe(exc)}")


def _check_output(path: Path) -> Path:
    if path.is_dir():
        raise BadInput(f"--output {path} is a directory; give a file path")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise BadInput(f"--output {path}: folder {folder} does not exist; create it first")
    return folder


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temp file in the same folder + rename, so a reader never sees half a report.

    Only a regular file is replaced: ``/dev/null``, a FIFO or a terminal is written to as it is (renaming
    over a device as root would put a plain file in its place), and a symlink keeps pointing where it did.
    """
    path = path.resolve() if path.is_symlink() else path
    folder = _check_output(path)
    if path.exists() and not path.is_file():
        with path.open("w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        # mkstemp makes the file 0600; a report is a file like any other the user writes (umask applies).
        os.fchmod(fd, 0o666 & ~_umask())
        # Reports are inert (no lone surrogate); this is the last resort should one slip through (R7-3).
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask, read without setting it (os.umask would change it for every thread meanwhile)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _batch_parser() -> Parser:

    parser = Parser(
        prog="grade batch",
        description="Grade every target in FILE in parallel; write one report per candidate and a summary.",
        epilog="FILE: one target per line (blank and # lines ignored), or a CSV with a candidate column "
        "and a target (or repo) column. --shard I/N grades the I-th of N slices into its own folder; "
        "`grade merge` gathers them. Exit codes: 0 the batch completed (even with candidates that were "
        "not assessable), 2 bad FILE or option.",
        deprecated=DEPRECATED,
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="the targets to grade")
    parser.add_argument(
        "--jobs", "-j", type=positive(int, "--jobs"), help="candidates graded at once (the number of cores)"
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        metavar="DIR",
        help="a new output folder (grade-batch-<timestamp>; with --shard, ...-shard-I-of-N)",
    )
    parser.add_argument("--rubric", type=Path, help="rubric YAML (default: the bundled default rubric)")
    parser.add_argument(
        "--timeout",
        type=positive(float, "--timeout"),
        default=300.0,
        help="seconds allowed per command a submission runs (300)",
    )
    parser.add_argument(
        "--budget",
        type=positive(float, "--budget"),
        metavar="SECONDS",
        help="seconds each candidate's grade may take (4 x --timeout)",
    )
    parser.add_argument(
        "--format",
        action="append",
        choices=FORMATS,
        default=[],
        help="extra report format per candidate (json and markdown are always written); repeatable",
    )
    parser.add_argument("--cache-dir", type=Path, help="where installed environments are cached")
    parser.add_argument(
        "--shard", metavar="I/N", help="grade only the I-th of N deterministic slices of FILE (1-based)"
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors on stderr")
    return parser


def _cmd_batch(args: list[str]) -> int:

    opts = _batch_parser().parse_args(args)
    shard = parse_shard(opts.shard) if opts.shard is not None else None
    listed = read_batch_file(opts.file)
    entries = shard.pick(listed) if shard is not None else listed
    rubric = load_rubric(opts.rubric)
    out = opts.output or default_out(shard)
    check_store_folder(out)
    started = time.monotonic()
    display = make_display(quiet=opts.quiet, batch_total=len(entries))
    try:
        outcomes = run_batch(
            entries,
            rubric=rubric,
            out=out,
            source=opts.file,
            jobs=opts.jobs,
            timeout=opts.timeout,
            budget=opts.budget,
            cache_root=opts.cache_dir,
            formats=opts.format,
            display=display,
            shard=shard,
            listed=len(listed),
        )
    finally:
        display.close()
    failed = sum(1 for o in outcomes if o.report is None)
    which = f" (shard {shard.label()} of {len(listed)})" if shard is not None else ""
    display.say(
        f"[done] {time.monotonic() - started:.1f}s {len(outcomes)} candidates{which}: "
        f"{len(outcomes) - failed} graded, {failed} not assessable -> {out / 'summary.md'}"
    )
    return EXIT_OK


def _merge_parser() -> Parser:
    parser = Parser(
        prog="grade merge",
        description="Gather the folders of `grade batch FILE --shard I/N` (all N of them) into one batch "
        "folder with summary.csv and summary.md, as one `grade batch FILE` would have written.",
        epilog="The shards must come from the same FILE and rubric. Exit codes: 0 merged, 2 a shard missing, "
        "twice, from another FILE or rubric, or OUT not new.",
        deprecated=DEPRECATED,
    )
    parser.add_argument("output", type=Path, metavar="OUT", help="a new folder for the merged batch")
    parser.add_argument("shards", type=Path, nargs="+", metavar="SHARD_DIR", help="every shard's folder")
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors on stderr")
    return parser


def _cmd_merge(args: list[str]) -> int:

    opts = _merge_parser().parse_args(args)
    result = merge_shards(opts.output, opts.shards)
    if not opts.quiet:
        _say(
            f"[done] merged {len(opts.shards)} shards: {result.candidates} candidates, "
            f"{result.graded} graded, {result.candidates - result.graded} not assessable "
            f"-> {result.out / 'summary.md'}"
        )
    return EXIT_OK


def _rescore_parser() -> Parser:
    parser = Parser(
        deprecated=DEPRECATED,
        prog="grade rescore",
        description="Score stored runs again under a new rubric from their stored facts (runs no code).",
        epilog="RUN_DIR: a folder written by `grade batch` or `grade --store`. The replaced reports are kept "
        "under history/<timestamp>/. Exit codes: 0 re-scored, 2 bad RUN_DIR or a rubric that needs facts "
        "the runs did not store.",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a batch folder or one stored run")
    parser.add_argument("--rubric", type=Path, required=True, metavar="NEW.yaml", help="the new rubric")
    parser.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    return parser


def _cmd_rescore(args: list[str]) -> int:

    opts = _rescore_parser().parse_args(args)
    result = rescore(opts.run_dir, opts.rubric, dry_run=opts.dry_run)
    if opts.quiet:
        return EXIT_OK
    width = max((len(c.candidate) for c in result.candidates), default=0)
    lines: list[str] = []
    for cand in result.candidates:
        name = cand.candidate.ljust(width)
        if cand.reason:
            lines.append(f"{name}  not assessable: {cand.reason}")
        elif not cand.changes:
            lines.append(f"{name}  no change")
        lines.extend(f"{name}  {change.line()}" for change in cand.changes)
    for key, (old, new) in result.thresholds_changed.items():
        lines.append(
            f"note: threshold {key} {old} -> {new}: rows use the new value, but facts a check computed "
            "from it at grading time keep the old one (re-grade to apply it there)"
        )
    rubric = f"{result.rubric.name!r} ({result.rubric.sha256[:12]})"
    if not result.rewritten and not result.history:
        lines.append(
            f"nothing changed: every run in {opts.run_dir} is already scored with {rubric}; nothing written"
        )
    elif opts.dry_run:
        lines.append(
            f"would re-score {len(result.candidates)} run(s) with {rubric} (--dry-run: nothing written)"
        )
    else:
        lines.append(f"re-scored {len(result.candidates)} run(s) with {rubric}")
        kept = result.history[0].name if result.history else "?"
        lines.append(
            f"wrote {result.rewritten} run(s)"
            + (" and the batch summaries" if (opts.run_dir / "batch.json").is_file() else "")
            + f"; the files replaced are kept in history/{kept}/ inside each folder written"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK


def _drift_parser() -> Parser:
    from grader.drift_report.render import FORMATS as DRIFT_FORMATS

    parser = Parser(
        prog="grade drift",
        deprecated=DEPRECATED,
        description=(
            "Re-record the submission's inputs twice, interleaved ticket by ticket, each run into its own "
            "scratch tape folder: a control arm against the model the tapes came from and a candidate arm "
            "against the new one. Report, denominator first, every ticket's recorded, control and candidate "
            "verdicts, contract violations, termination and tool-call differences, tokens and latency, the "
            "candidate-vs-control difference beside the control's own drift from the recording (the noise "
            "floor, with 95% Wilson intervals), and whether the acceptance rule holds."
        ),
        epilog=(
            "PROFILE: a stand-in profile (baseline, drifted or a YAML file; docs/standin.md), served on "
            "loopback inside the sandbox. URL: a live endpoint (https, or http to loopback); its key comes "
            "from the submission's api_key_env in this environment, and only that arm gets the network. "
            "Exit codes: 0 the candidate meets the acceptance rule, 2 bad input (target, profile, URL, "
            "acceptance FILE:LINE), 3 it does not meet it (the report is still written), 4 not assessable "
            "(the submission could not be installed, or a run could not be made), 1 internal error, "
            "130 interrupted."
        ),
    )
    parser.add_argument("target", help="git URL, local git repo, folder, or .zip/.tar.gz archive")
    parser.add_argument(
        "--control",
        required=True,
        metavar="PROFILE|URL",
        help="the model the tapes came from (e.g. baseline)",
    )
    parser.add_argument(
        "--candidate", required=True, metavar="PROFILE|URL", help="the model to switch to (e.g. drifted)"
    )
    parser.add_argument(
        "--model", metavar="M", help="the model the candidate should be; a note when its answers name another"
    )
    parser.add_argument(
        "--replay-until",
        type=_whole("--replay-until"),
        metavar="N",
        help="serve calls 1..N of each run from the committed tapes and the rest from the arm "
        "(CASSETTE_REPLAY_UNTIL; template-built agents)",
    )
    parser.add_argument(
        "--trials",
        type=positive(int, "--trials"),
        default=1,
        metavar="K",
        help="runs of each ticket per arm (1)",
    )
    parser.add_argument("--format", choices=DRIFT_FORMATS, default="text", help="report format (text)")
    parser.add_argument(
        "--output", "-o", type=Path, metavar="PATH", help="write the report here instead of stdout"
    )
    parser.add_argument(
        "--accept",
        type=Path,
        metavar="FILE",
        help="the acceptance rule (YAML; default: the bundled rubric/drift-acceptance.yaml)",
    )
    parser.add_argument(
        "--timeout",
        type=positive(float, "--timeout"),
        default=300.0,
        metavar="SECONDS",
        help="seconds allowed for the install and for each run (300)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, metavar="PATH", help="where installed environments are cached"
    )
    parser.add_argument(
        "--keep-workspace", action="store_true", help="keep the checkout and the scratch tapes"
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors on stderr")
    return parser


def _whole(what: str) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{what} must be 0 or more, got {text!r}")
        return value

    return convert


def _cmd_drift(args: list[str]) -> int:
    from grader.drift_report.acceptance import load_acceptance
    from grader.drift_report.command import drift
    from grader.drift_report.render import render

    opts = _drift_parser().parse_args(args)
    if opts.output is not None:
        _check_output(opts.output)
    # The rule is validated before anything runs: a typo in it should cost seconds, not two arms.
    acceptance = load_acceptance(opts.accept)
    started = time.monotonic()
    display, progress = _open_display(opts.quiet, 0)
    try:
        report = drift(
            opts.target,
            control=opts.control,
            candidate=opts.candidate,
            acceptance=acceptance,
            trials=opts.trials,
            replay_until=opts.replay_until,
            model=opts.model,
            timeout=opts.timeout,
            cache_root=opts.cache_dir,
            keep_workspace=opts.keep_workspace,
            progress=progress,
        )
    except NotAssessable as exc:
        display.close()  # before the line, so a live display does not draw over it
        _say(f"grade: not assessable: {' '.join(str(exc.reason).split())}")
        return EXIT_NOT_ASSESSABLE
    finally:
        display.close()
    _deliver(opts.output, render(report, opts.format))
    verdict = report["acceptance"]["verdict"]
    if not opts.quiet:
        _say(f"[done] {time.monotonic() - started:.1f}s acceptance: {verdict}{_where(opts.output)}")
    return EXIT_OK if verdict == "accept" else EXIT_BELOW
