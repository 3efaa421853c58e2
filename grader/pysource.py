"""Parse a submission's Python source for the static checks, whatever the file holds.

``ast.parse`` turns a file of 200,000 chained ``+`` (or brackets) into RecursionError, and a tree that parses
can still be deep enough to overflow the recursive visitors the checks use afterwards. Either would crash the
check, and a crashing check must never be something a submission can cause on purpose. Here both are a
SyntaxError, like any other source the grader cannot read, so every caller handles them in the one way it
already handles a syntax error.
"""

from __future__ import annotations

import ast

__all__ = ["MAX_DEPTH", "parse"]

# Far deeper than any hand-written code, far below the interpreter's recursion limit (1000).
MAX_DEPTH = 200


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """The module's tree; SyntaxError (with the reason) when it is not Python the grader can walk safely."""
    try:
        tree = ast.parse(source, filename=filename)
    except (RecursionError, MemoryError) as exc:
        raise SyntaxError(f"too deeply nested for the grader to parse ({type(exc).__name__})") from None
    if _depth_exceeds(tree, MAX_DEPTH):
        raise SyntaxError(f"nested more than {MAX_DEPTH} levels deep")
    return tree


def _depth_exceeds(tree: ast.AST, limit: int) -> bool:
    stack = [(tree, 1)]
    while stack:  # iterative: the point is not to recurse
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return False
