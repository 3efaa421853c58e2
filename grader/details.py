"""The detail lines a reviewer reads under a row: each fact once, repeats folded into one line with a count.

A check reports both prose details and structured findings, and often describes the same finding in both; a
submission with 24 tapes missing the same field would otherwise get 24 lines that differ only by path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from grader.checks import Finding

__all__ = ["counted", "row_details", "submission_relative"]

# Lines that differ only by where they point (`path:line`, `path`, `commit:path:line`) say the same thing.
# A place is a path with a folder or a file extension; `host:port` is what an attempt reached, not a place.
_LOCATION = re.compile(
    r"(?:\b[0-9a-f]{7,40}:)?"
    r"(?:(?:[\w.@+-]+/)+[\w.@+-]+|[\w@+-][\w.@+-]*\.(?:py|pyi|json|jsonl|ya?ml|md|toml|txt|cfg|ini|env|lock|sh)\b"
    r"|\bMakefile\b)(?::\d+)*"
)
FOLD_AT = 4  # this many lines alike become one
EXAMPLES = 3  # locations the folded line still names


def row_details(details: Sequence[str], findings: Iterable[Finding]) -> list[str]:
    """``details`` then every finding the details do not already describe, each once, repeats folded."""
    lines = list(dict.fromkeys(details))
    for finding in findings:
        if any(finding.location in line and finding.message in line for line in lines):
            continue
        line = f"{finding.location}: {finding.message}"
        if line not in lines:
            lines.append(line)
    return _fold(lines)


def _fold(lines: list[str]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for line in lines:
        groups.setdefault(_LOCATION.sub("…", line), []).append(line)
    out: list[str] = []
    for line in lines:
        group = groups[_LOCATION.sub("…", line)]
        if len(group) < FOLD_AT:
            out.append(line)
        elif line is group[0]:
            places = [m.group(0) for g in group[1 : 1 + EXAMPLES] if (m := _LOCATION.search(g))]
            more = len(group) - 1 - len(places)
            tail = ", ".join(places) + (f" and {more} more" if more else "")
            out.append(f"{line} (+{len(group) - 1} more like it: {tail})")
    return out


# A path inside an installed environment (the grader's cache) names a dependency, not a place a reviewer
# can open: keep what follows site-packages/.
_INSTALLED = re.compile(r"(?:/[^\s:'\"()\[\]]+)?/(?:site|dist)-packages/")


def submission_relative(text: str, workspace_root: Path | str) -> str:
    """``text`` with paths into the grader's workspace made relative to the submission's root.

    The checkout, its pristine copy and the probes' scratch copies all live in the workspace (deleted after
    the grade), one to three folders down; what a reviewer can open is the path inside the submission.
    """
    root = re.escape(str(workspace_root).rstrip("/"))
    # Every run's folder is ``scratch/<random>/repo`` (docs/security.md, guarantee 11); the pristine copy and
    # the checkout are one folder down.
    text = re.sub(root + r"/(?:scratch/[^/\s]+/repo|scratch/[^/\s]+|[^/\s]+)/", "", text)
    return _INSTALLED.sub("site-packages/", text)


def counted(n: object, noun: str) -> str:
    """``1 tape``, ``2 tapes``: a count with its noun, for evidence lines."""
    return f"{n} {noun}" + ("" if n == 1 else "s")
