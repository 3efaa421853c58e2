"""Render a grade-report/1 dict as json, markdown, text, sarif, junit, gradescope or html.

One module per format; this is the dispatcher. Every string of the report goes through
`grader.inert.inert_tree` here, once, before any renderer sees it: test ids, skip reasons, paths and excerpts
come from the submission, and no format may carry an escape sequence or a bidi override to the reviewer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.inert import inert_tree
from grader.report import as_json, as_markdown, as_text, gradescope, html, junit, sarif

__all__ = ["FORMATS", "render"]

_RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "json": as_json.render,
    "markdown": as_markdown.render,
    "text": as_text.render,
    "sarif": sarif.render,
    "junit": junit.render,
    "gradescope": gradescope.render,
    "html": html.render,
}
FORMATS = tuple(_RENDERERS)


def render(report: dict[str, Any], fmt: str) -> str:
    """The report in ``fmt`` (one of FORMATS), ending with a newline."""
    try:
        renderer = _RENDERERS[fmt]
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}") from None
    return renderer(inert_tree(report))
