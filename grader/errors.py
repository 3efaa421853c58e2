"""The grader's two failure kinds: bad input from the user, and infrastructure that cannot assess a row."""

from __future__ import annotations

__all__ = ["BadInput", "GradeError", "NotAssessable"]


class GradeError(Exception):
    """Base of every error the grader raises on purpose."""


class BadInput(GradeError):
    """The user's input is unusable (unreachable target, unsafe archive, invalid rubric).

    The CLI prints ``grade: error: {e}`` on one line and exits 2, so the message must be one line
    that says what is wrong, where, and what to do.
    """

    def __init__(self, message: str) -> None:
        text = str(message)
        # A multi-line message would break the CLI's one-line contract.
        if "\n" in text or "\r" in text:
            text = " ".join(text.split())
        super().__init__(text)


class NotAssessable(GradeError):
    """Infrastructure failed (install, index unreachable): the dependent rows become not-assessable."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
