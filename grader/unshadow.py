"""Tests a module hides from pytest before collection, and bringing them back in a scratch copy.

Red team 20, F1: a failing test deleted (``del test_x``), rebound to something else (``test_x = None``) or
defined a second time under its name in the same module or class is gone before pytest collects the module:
neither a deselection nor a skip shows it, and no rerun of the file as written can run it. The static scan
lists each (`tamper`); the whole-suite run's scratch copy gets the file rewritten so that the hidden test is
collected again (`revive`), and a failure there counts as a test the suite's own run left out.

Only the plain statement forms at the top level of a module or class body are read: a rebinding whose value
names the test (``test_x = mark(test_x)``, a wrapper) is listed but left alone, and dynamic forms
(``globals().pop``, ``delattr``) are not seen (docs/security.md).
"""

from __future__ import annotations

import ast
import io
import re
from dataclasses import dataclass
from pathlib import Path

from . import pysource
from .safeio import read_bytes

__all__ = ["Shadow", "revive", "shadows"]

_CAP = 2 * 1024 * 1024  # a test module larger than this is not rewritten


@dataclass(frozen=True)
class Shadow:
    """One statement that hides a test defined earlier in the same scope."""

    kind: str  # "del" | "reassigns" | "redefines"
    name: str
    line: int  # the hiding statement's line
    defined: int  # the line of the definition it hides
    wraps: bool = False  # a rebinding whose value names the test: listed, not undone
    col: int = 0  # the hiding target's columns on `line` (del / reassigns)
    end_col: int = 0


def shadows(tree: ast.AST) -> list[Shadow]:
    """Every statement of ``tree`` (a test module) hiding a ``test*`` function defined before it in the same
    module or class body, in source order."""
    found: list[Shadow] = []
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]
    for scope in scopes:
        defined: dict[str, int] = {}
        for node in getattr(scope, "body", []):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                if node.name in defined:
                    found.append(Shadow("redefines", node.name, node.lineno, defined[node.name]))
                defined[node.name] = node.lineno
            elif isinstance(node, (ast.Delete, ast.Assign)):
                kind = "del" if isinstance(node, ast.Delete) else "reassigns"
                value = getattr(node, "value", None)
                for target in node.targets:
                    if not (isinstance(target, ast.Name) and target.id in defined):
                        continue
                    wraps = value is not None and any(
                        isinstance(n, ast.Name) and n.id == target.id for n in ast.walk(value)
                    )
                    same_line = target.end_lineno == target.lineno
                    found.append(
                        Shadow(
                            kind,
                            target.id,
                            target.lineno,
                            defined[target.id],
                            wraps,
                            target.col_offset if same_line else 0,
                            (target.end_col_offset or 0) if same_line else 0,
                        )
                    )
                    # Kept in `defined`: once the grader undoes this, a later `def test_x` hides the first.
    return sorted(found, key=lambda s: (s.line, s.col))


def _revived_name(name: str, defined: int) -> str:
    """What an earlier definition hidden by a second one is called in the whole-suite run: the test's id
    then names the line the reviewer reads."""
    return f"{name}__hidden_L{defined}"


def revive(copy: Path, rel: str) -> list[Shadow]:
    """Rewrite ``copy/rel`` (a scratch copy's test module) so that the tests it hides are collected: a
    ``del`` of a test deletes nothing (``del []``), a plain rebinding binds another name, and an earlier
    definition another one redefines is renamed (`_revived_name`). Line numbers do not move.

    Returns what was undone; nothing when the file is unsafe to read (link, not regular, over the cap), does
    not parse, or hides nothing this module undoes.
    """
    path = copy / rel
    try:
        text = read_bytes(path, cap=_CAP, root=copy).decode("utf-8")
        tree = pysource.parse(text, filename=rel)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    # Python's own line breaks only (str.splitlines also splits at \x0c, \x1c...: ast's numbers would drift).
    lines = io.StringIO(text, newline="").readlines()
    # (line, start col, end col, replacement); applied right to left within a line.
    edits: list[tuple[int, int, int, str]] = []
    undone: list[Shadow] = []
    found = shadows(tree)
    for shadow in found:
        if shadow.kind == "redefines":
            if any(
                w.wraps and w.name == shadow.name and shadow.defined < w.line < shadow.line for w in found
            ):
                continue  # `test_x = mark(test_x)` in between names the first definition: it keeps its name
            source = lines[shadow.defined - 1] if shadow.defined <= len(lines) else ""
            match = re.search(rf"\bdef\s+({re.escape(shadow.name)})\b", source)
            if match is None:
                continue
            new = _revived_name(shadow.name, shadow.defined)
            edits.append((shadow.defined, match.start(1), match.end(1), new))
        elif shadow.wraps or shadow.end_col <= shadow.col:
            continue
        else:
            # Columns are UTF-8 byte offsets; the names are identifiers in a line that may hold other text.
            raw = lines[shadow.line - 1].encode("utf-8")
            start = len(raw[: shadow.col].decode("utf-8"))
            end = len(raw[: shadow.end_col].decode("utf-8"))
            new = "[]" if shadow.kind == "del" else f"_{shadow.name}__rebound_L{shadow.line}"
            edits.append((shadow.line, start, end, new))
        undone.append(shadow)
    if not edits:
        return []
    for line, start, end, new in sorted(edits, reverse=True):
        text_line = lines[line - 1]
        lines[line - 1] = text_line[:start] + new + text_line[end:]
    # The copy is the grader's own (made from the pristine copy); the run sees it read-only.
    path.unlink()
    path.write_text("".join(lines), encoding="utf-8")
    return undone
