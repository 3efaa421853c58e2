"""``python -m grader.checks [--markdown | --update-docs [PATH]]``: print or refresh the check catalogue.

docs/rubric.md carries the catalogue between ``<!-- checks:start -->`` and ``<!-- checks:end -->``; a test
fails when that copy is stale, and ``--update-docs`` rewrites it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.checks import catalogue

START = "<!-- checks:start -->"
END = "<!-- checks:end -->"
_DOCS = Path(__file__).resolve().parents[2] / "docs" / "rubric.md"


def docs_section(text: str) -> str | None:
    """The catalogue currently in a docs page (between the markers), or None without markers."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(START) : end].strip("\n") + "\n"


def with_catalogue(text: str, section: str) -> str:
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {START} ... {END} markers")
    return f"{text[: start + len(START)]}\n{section.rstrip()}\n{text[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.checks", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--markdown", action="store_true", help="print the catalogue as Markdown")
    group.add_argument(
        "--update-docs",
        nargs="?",
        const=_DOCS,
        type=Path,
        metavar="PATH",
        help=f"rewrite the catalogue in {_DOCS}",
    )
    args = parser.parse_args(argv)
    if args.update_docs is not None:
        path: Path = args.update_docs
        try:
            path.write_text(
                with_catalogue(path.read_text(encoding="utf-8"), catalogue("markdown")), encoding="utf-8"
            )
        except (OSError, ValueError) as exc:
            print(f"python -m grader.checks: error: {path}: {exc}", file=sys.stderr)
            return 2
        print(f"updated the check catalogue in {path}")
        return 0
    sys.stdout.write(catalogue("markdown" if args.markdown else "text"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
