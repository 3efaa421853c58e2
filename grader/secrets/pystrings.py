"""Python string literals as the interpreter joins them: adjacent literals (``"sk-proj-" "abc..."``, one per
line inside parentheses) and a literal continued with a backslash at the end of a line hold a key that no
line of the file shows whole (red team 29, F2); so do literals added together (``"sk-proj-" + "abc..."``),
which the compiler folds into one constant. Each such string's value, with the line it starts at."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from grader import pysource

__all__ = ["MAX_SOURCE", "joined_strings", "may_join"]

MAX_SOURCE = 1024 * 1024  # a larger .py file is data, not source a key would be written into
_MIN_VALUE = 16  # shorter than any key a rule finds
# Two literals side by side (a space, a line break, a backslash-newline between them), a backslash-newline
# inside one, or two added with `+`: nothing else makes a constant string value no line holds. Files without
# any are never parsed. One character per repetition: `(?:[ \t]+|...)+` backtracked exponentially on a long
# run of spaces.
_JOINED = re.compile(
    rb"""["'](?:[ \t]|\\?\r?\n)+[rRbBuUfF]{0,2}["']|\\\r?\n"""
    rb"""|["'](?:[ \t]|\\?\r?\n)*\+(?:[ \t]|\\?\r?\n)*[rRbBuUfF]{0,2}["']"""
)


def may_join(data: bytes) -> bool:
    """Whether Python source ``data`` is one `joined_strings` parses (it holds a join, within the size)."""
    return len(data) <= MAX_SOURCE and _JOINED.search(data) is not None


def joined_strings(data: bytes, filename: str = "<source>") -> Iterator[tuple[int, str]]:
    """(line, value) of every string literal in Python source ``data`` whose value the file holds nowhere
    as it is; nothing for a file that does not parse or is not one `may_join` accepts."""
    if not may_join(data):
        return
    try:
        tree = pysource.parse(data, filename=filename)
    except (SyntaxError, ValueError):
        return
    starts = [0]  # byte offset of each line: ast's columns are UTF-8 byte offsets
    starts += [m.end() for m in re.finditer(rb"\n", data)]
    added: set[int] = set()  # the literals inside a sum already read whole
    for node in ast.walk(tree):
        value: str | None
        if isinstance(node, ast.BinOp):
            if id(node) in added:
                continue
            parts = _summed(node)
            if parts is None:
                continue
            added.update(id(part) for part in ast.walk(node))
            value = "".join(v for v in map(_value, parts) if v is not None)
        elif isinstance(node, (ast.Constant, ast.JoinedStr)):
            if id(node) in added:
                continue
            value = _value(node)
        else:
            continue
        if value is None or len(value) < _MIN_VALUE:
            continue
        line, end_line = node.lineno, node.end_lineno or 0
        if not 0 < line <= end_line <= len(starts):
            continue
        # Only the literal's own text is searched: the whole file, for every string, was quadratic.
        written = data[starts[line - 1] + node.col_offset : starts[end_line - 1] + (node.end_col_offset or 0)]
        # Two literals or a continued one, not merely escapes (`"\\n"`): the same test as the file's.
        if _JOINED.search(written) and value.encode("utf-8", "surrogateescape") not in written:
            yield line, value


def _summed(node: ast.expr) -> list[ast.expr] | None:
    """The string literals a sum of them adds, in order; None when anything else takes part."""
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, ast.Add):
            return None
        left, right = _summed(node.left), _summed(node.right)
        return None if left is None or right is None else left + right
    return [node] if isinstance(node, (ast.Constant, ast.JoinedStr)) and _value(node) is not None else None


def _value(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    # f"sk-proj-" f"{''}abc": an f-string made of constant parts only is one string too.
    if isinstance(node, ast.JoinedStr) and all(
        isinstance(part, ast.Constant) and isinstance(part.value, str) for part in node.values
    ):
        return "".join(str(part.value) for part in node.values)  # type: ignore[attr-defined]
    return None
