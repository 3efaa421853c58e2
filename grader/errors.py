"""The grader's two failure kinds: bad input from the user, and infrastructure that cannot assess a row."""

from __future__ import annotations

__all__ = ["BadInput", "GradeError", "NotAssessable", "describe"]


class GradeError(Exception):
    """Base of every error the grader raises on purpose."""


class BadInput(GradeError):
    """The user's input is unusable (unreachable target, unsafe archive, invalid rubric).

    The CLI prints ``grade: error: {e}`` on one line and exits 2, so the message must be one line
    that says what is wrong, where, and what to do. ``problems`` (each one line, ``file:line: ...``) are
    every problem found when there are several: the CLI prints one ``grade: error:`` line per problem
    instead, so nobody fixes a rubric one run at a time.
    """

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        text = _one_line(message)
        super().__init__(text)
        self.problems = tuple(_one_line(p) for p in problems)


def _one_line(message: object) -> str:
    text = str(message)
    # A multi-line message would break the CLI's one-line-per-problem contract.
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


class NotAssessable(GradeError):
    """Infrastructure failed (install, index unreachable): the dependent rows become not-assessable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def describe(exc: BaseException, limit: int | None = 300) -> str:
    """``Type: message`` of an exception on one line (whitespace folded), at most ``limit`` characters."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if limit is None else line[:limit]
