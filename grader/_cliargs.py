"""Argument parsing shared by `grade` and its sub-commands: usage errors are bad input, one line, exit 2."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from grader.errors import BadInput


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is the same one line (and exit 2) as every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise BadInput(f"{message} (see {self.prog} --help)")


def positive(kind: Callable[[str], float], what: str) -> Callable[[str], float]:
    """An argparse type: a number of `kind` greater than 0, with a message naming `what`."""

    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{what} must be greater than 0, got {text!r}")
        return value

    return convert
