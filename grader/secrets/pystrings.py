"""Python string literals as the interpreter joins them: adjacent literals (``"sk-proj-" "abc..."``, one per
line inside parentheses) and a literal continued with a backslash at the end of a line hold a key that no
line of the file shows whole (red team 29, F2); so do literals added together (``"sk-proj-" + "abc..."``),
which the compiler folds into one constant. Each such string's value, with the line it starts at. Python
written elsewhere (a Markdown fence, a notebook's code cell: red team 31) is read the same way."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator

from grader import pysource

__all__ = ["MAX_SOURCE", "embedded_python", "joined_strings", "may_join"]

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
    if isinstance(node, ast.Constant) and isinstance(node.value, bytes):  # b"sk-proj-" b"abc...": one too
        return node.value.decode("latin-1")
    # f"sk-proj-" f"{''}abc": an f-string made of constant parts only is one string too.
    if isinstance(node, ast.JoinedStr) and all(
        isinstance(part, ast.Constant) and isinstance(part.value, str) for part in node.values
    ):
        return "".join(str(part.value) for part in node.values)  # type: ignore[attr-defined]
    return None


# A fenced block in Markdown, tagged as Python (or untagged: a snippet is most often the project's language).
_FENCE = re.compile(
    rb"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?:python3?|py|ipython3?|pycon)?[ \t]*\r?\n"
    rb"(?P<code>.*?)^[ \t]{0,3}(?P=fence)",
    re.M | re.S,
)
# IPython's magics and shell escapes are not Python: blanked, so the rest of the cell still parses.
_MAGIC = re.compile(rb"^([ \t]*)[%!].*$", re.M)
_SOURCE_KEY = re.compile(rb'"source"[ \t\r\n]*:')


def embedded_python(data: bytes, name: str) -> Iterator[tuple[int, bytes]]:
    """(lines before it in the file, Python source) for each piece of Python inside ``data`` that is not a
    Python file: a Markdown file's fenced blocks, a notebook's code cells. Pieces `may_join` would not
    parse are left out."""
    lowered = name.lower()
    if lowered.endswith((".md", ".markdown")) and len(data) <= MAX_SOURCE:
        for match in _FENCE.finditer(data):
            code = match.group("code")
            if may_join(code):
                yield data.count(b"\n", 0, match.start("code")), code
    elif lowered.endswith(".ipynb") and len(data) <= 4 * MAX_SOURCE:
        yield from _notebook_cells(data)


def _notebook_cells(data: bytes) -> Iterator[tuple[int, bytes]]:
    try:
        notebook = json.loads(data)
    except (ValueError, RecursionError):
        return
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        return
    # The n-th "source" key is the n-th cell's (nbformat writes cells in order, one source line per line):
    # its first string's line is the cell's first line, and findings land where the key is, or near it.
    keys = [data.count(b"\n", 0, data.find(b'"', m.end())) + 1 for m in _SOURCE_KEY.finditer(data)]
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source")
        text = "".join(s for s in source if isinstance(s, str)) if isinstance(source, list) else source
        if not isinstance(text, str):
            continue
        code = _MAGIC.sub(rb"\1pass", text.encode("utf-8", "surrogateescape"))
        if may_join(code):
            yield (keys[index] if index < len(keys) else 1) - 1, code
