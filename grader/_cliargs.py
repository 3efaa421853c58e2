"""Argument parsing shared by `grade` and its sub-commands: usage errors are bad input, one line, exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from grader.errors import BadInput


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is the same one line (and exit 2) as every other bad input.

    ``deprecated`` maps an old option spelling to today's: it is still accepted, with one note on stderr,
    so scripts written against an older grader keep working while they are updated.
    """

    def __init__(self, *args: Any, deprecated: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deprecated = dict(deprecated or {})

    def error(self, message: str) -> NoReturn:
        raise BadInput(f"{message} (see {self.prog} --help)")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        return super().parse_args(self._modern(list(sys.argv[1:] if args is None else args)), namespace)

    def _modern(self, args: list[str]) -> list[str]:
        out: list[str] = []
        for index, arg in enumerate(args):
            if arg == "--":
                return out + args[index:]
            name, eq, value = arg.partition("=")
            if name in self.deprecated:
                new = self.deprecated[name]
                print(f"{self.prog}: note: {name} is deprecated; use {new}", file=sys.stderr, flush=True)
                arg = f"{new}{eq}{value}"
            out.append(arg)
        return out


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
