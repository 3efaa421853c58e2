"""`grade --selftest [--rubric PATH] [--case ID]... [--corpus PATH]...`: run the calibration corpora (by
default the shipped mutations of the sample and the independent submissions); one line per row.

Exit codes: 0 every case landed in its bands; 2 bad input (rubric, corpus, --case, --json path);
3 some case is out of band or could not be graded (the last line names each failing case and row).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from grader._cliargs import Parser, positive
from grader.errors import BadInput
from grader.rubric import load_rubric
from grader.selftest.corpus import default_corpus_paths, load_corpus
from grader.selftest.runner import CaseResult, run_selftest

__all__ = ["EXIT_FAILED", "main"]

EXIT_OK = 0
EXIT_FAILED = 3


def _parser() -> Parser:
    parser = Parser(
        prog="grade --selftest",
        description="Grade the calibration corpus (known good and known bad submissions) with this grader "
        "and a rubric; fail when any row lands outside its expected band.",
        epilog="Exit codes: 0 all cases in band, 2 bad input, 3 a case out of band (named on the last line).",
    )
    parser.add_argument("--rubric", type=Path, help="rubric YAML (default: the bundled default rubric)")
    parser.add_argument(
        "--case", action="append", default=[], metavar="ID", help="run only this case (repeatable)"
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="a corpus file, repeatable (default: both shipped ones: grader/selftest/corpus.yaml, mutations "
        "of the sample, and grader/selftest/independent.yaml, submissions the kit did not write)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every verdict here as JSON")
    parser.add_argument(
        "--jobs", "-j", type=positive(int, "--jobs"), default=2, help="cases graded at once (2)"
    )
    parser.add_argument(
        "--timeout", type=positive(float, "--timeout"), default=120.0, help="seconds per command (120)"
    )
    parser.add_argument("--cache-dir", type=Path, help="where installed environments are cached")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    return parser


def main(args: Sequence[str]) -> int:
    """Run the selftest; raises BadInput for bad input (the caller prints it and exits 2)."""

    opts = _parser().parse_args(list(args))
    if opts.json is not None and not (opts.json.parent if str(opts.json.parent) else Path(".")).is_dir():
        raise BadInput(f"--json {opts.json}: its folder does not exist; create it first")
    rubric = load_rubric(opts.rubric)
    cases = [case for path in opts.corpus or default_corpus_paths() for case in load_corpus(path)]
    twice = sorted(case_id for case_id, n in Counter(c.id for c in cases).items() if n > 1)
    if twice:
        raise BadInput(
            f"calibration case ids appear in more than one corpus: {', '.join(twice)}; rename them"
        )
    if opts.case:
        known = {c.id for c in cases}
        unknown = [c for c in opts.case if c not in known]
        if unknown:
            names = ", ".join(sorted(known))
            raise BadInput(f"no calibration case named {', '.join(unknown)}; cases: {names}")
        cases = [c for c in cases if c.id in opts.case]

    lock = threading.Lock()
    started = time.monotonic()

    def show(result: CaseResult) -> None:
        with lock:
            if not opts.quiet:
                verdict = "ok" if result.ok else "FAILED"
                seconds = time.monotonic() - started
                print(f"[selftest] {seconds:.1f}s {result.case.id}: {verdict}", file=sys.stderr)

    results = run_selftest(
        cases, rubric, timeout=opts.timeout, cache_root=opts.cache_dir, jobs=int(opts.jobs), on_result=show
    )
    for result in results:
        for line in result.lines():
            print(line)
    failed = [r for r in results if not r.ok]
    if opts.json is not None:
        payload = {
            "schema": "grade-selftest/1",
            "rubric": rubric.reference(),
            "ok": not failed,
            "cases": [r.as_dict() for r in results],
        }
        opts.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    rows = sum(1 for r in results for v in r.verdicts if v.band is not None or v.manual)
    unbanded = sum(1 for r in results for v in r.verdicts if v.band is None and not v.manual)
    gaps = sum(1 for r in results for v in r.verdicts if v.known_gap)
    if not failed:
        extra = f"; {unbanded} rows not banded, reported only" if unbanded else ""
        extra += f"; {gaps} known gaps, reported only" if gaps else ""
        print(f"selftest: all {len(results)} cases in band ({rows} rows{extra}), rubric {rubric.name!r}")
        sys.stdout.flush()
        return EXIT_OK
    names = ", ".join(
        f"{r.case.id} ({', '.join(v.row for v in r.verdicts if not v.ok) or 'not graded'})" for r in failed
    )
    print(f"selftest: FAILED {len(failed)} of {len(results)} cases: {names}")
    sys.stdout.flush()
    return EXIT_FAILED
