"""Tests a module hides from pytest before collection, and bringing them back in a scratch copy.

Red team 20, F1: a failing test deleted (``del test_x``), rebound to something else (``test_x = None``) or
defined a second time under its name in the same module or class is gone before pytest collects the module:
neither a deselection nor a skip shows it, and no rerun of the file as written can run it. The static scan
lists each (`tamper`); the whole-suite run's scratch copy gets the file rewritten so that the hidden test is
collected again (`revive`), and a failure there counts as a test the suite's own run left out.

Only the plain statement forms at the top level of a module or class body are read: a rebinding whose value
names the test (``test_x = mark(test_x)``, a wrapper) is listed but left alone, and dynamic forms
(``globals().pop``, ``delattr``) are not seen (docs/security.md).

Red team 25, F3–F5: tests pytest passes over by its own rules, with a warning at most: a ``Test*`` class that
defines ``__init__`` or ``__new__`` or is made a dataclass (``init``, ``dataclass``), a ``test*`` function
decorated as a fixture or a property that nothing in its module asks for by name (``fixture``,
``property``), and a ``test*`` name spelled with look-alike letters (``tеst_x`` with a Cyrillic ``е``:
``look-alike``), or that inherits a constructor from a class of its module (``inherits``). The copy gets
the constructor renamed (the base given without it), the decorator made a no-op, the name spelled in ASCII;
a test module whose file name is a look-alike is copied to its ASCII name (`revive_file_name`).
"""

from __future__ import annotations

import ast
import io
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from . import pysource
from .inert import draws_nothing
from .safeio import read_bytes, within

__all__ = ["Shadow", "ascii_skeleton", "enter_folder", "revive", "revive_file_name", "shadows"]

_CAP = 2 * 1024 * 1024  # a test module larger than this is not rewritten


@dataclass(frozen=True)
class Shadow:
    """One statement that hides a test defined earlier in the same scope."""

    # "del" | "reassigns" | "redefines"; never collected: "init" | "dataclass" | "fixture" | "property" |
    # "look-alike"
    kind: str
    name: str
    line: int  # the hiding statement's line
    defined: int  # the line of the definition it hides
    # a rebinding whose value names the test, a Test* class the module builds: listed, not undone
    wraps: bool = False
    col: int = 0  # the hiding target's columns on `line` (del / reassigns; a decorator, a base class)
    end_col: int = 0  # == col: the target goes on past `line` (a decorator spanning lines)
    via: str = ""  # "inherits": the module's class the constructor comes from

    def describe(self) -> str:
        """What hides the test, for a reviewer (the tamper scan adds why it matters)."""
        if self.kind == "init":
            return f"class {self.name} defines a constructor (line {self.line}): pytest does not collect it"
        if self.kind == "inherits":
            return f"class {self.name} inherits a constructor from {self.via}: pytest does not collect it"
        if self.kind in ("dataclass", "fixture", "property"):
            return f"{self.name} (line {self.defined}) is made a {self.kind} here: pytest does not collect it"
        if self.kind == "recode":
            return f"{self.name}'s code is replaced here: pytest runs other code under its name"
        if self.kind == "look-alike":
            return f"{self.name!r} is spelled with look-alike letters for {ascii_skeleton(self.name)!r}"
        return f"{self.kind} {self.name} (defined at line {self.defined})"


# Letters of other scripts drawn like Latin ones (Unicode's confusables, the ones a test name would use).
_LOOK_ALIKE = str.maketrans(
    "аеорсуххѕіјԁһӏԛԝТАВЕКМНОРСХЅІЈΑΒΕΖΗΙΚΜΝΟΡΤΥΧοντι",
    "aeorcyxxsijdhlqwTABEKMHOPCXSIJABEZHIKMNOPTYXovti",
)
_DATACLASS_MAKERS = frozenset({"dataclass", "define", "frozen", "mutable", "attrs", "s"})
_HIDING_DECORATORS = {"fixture": "fixture", "property": "property", "cached_property": "property"}
_REQUESTS = frozenset({"usefixtures", "getfixturevalue"})  # ways to ask for a fixture by its name


def ascii_skeleton(name: str) -> str:
    """``name`` as it reads: look-alike letters of other scripts, and accents, as the Latin letters they
    show; characters that draw nothing left out; trailing white space (`test_x.py `) dropped."""
    folded = unicodedata.normalize("NFKD", name.translate(_LOOK_ALIKE))
    # Red team 32: `te\u200bst_x.py`, `def te\u034fst_x`, `test_x.py `.
    return "".join(c for c in folded if not unicodedata.combining(c) and not draws_nothing(c)).rstrip()


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _makes_dataclass(deco: ast.expr) -> bool:
    """``@dataclass``, ``@attrs.define(...)``, ``@attr.s``: not a pytest mark that shares a name
    (``@pytest.mark.frozen``)."""
    target = deco.func if isinstance(deco, ast.Call) else deco
    marked = isinstance(target, ast.Attribute) and _decorator_name(target.value) == "mark"
    return _decorator_name(deco) in _DATACLASS_MAKERS and not marked


def _constructs(node: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: set[str]) -> bool:
    """Whether instances of ``node`` get a constructor pytest refuses: its own ``__init__``/``__new__``, a
    dataclass's, or one inherited from another class of the module."""
    if any(isinstance(i, ast.FunctionDef) and i.name in ("__init__", "__new__") for i in node.body):
        return True
    if any(_makes_dataclass(d) for d in node.decorator_list):
        return True
    seen.add(node.name)
    return any(
        isinstance(b, ast.Name)
        and b.id in classes
        and b.id not in seen
        and _constructs(classes[b.id], classes, seen)
        for b in node.bases
    )


def _decorator_cols(deco: ast.expr) -> tuple[int, int]:
    """A decorator's columns on its first line; both the start when it spans lines (the copy then puts a
    no-op in front of it instead of replacing it)."""
    start, end = _cols(deco)
    return (start, end) if deco.lineno == deco.end_lineno else (start, start)


def _asked_for(tree: ast.AST, name: str, kind: str) -> bool:
    """Whether the module uses ``name`` as what it was made: a fixture some test requests (a parameter,
    ``usefixtures``, ``getfixturevalue``), a property read as an attribute, a class it builds or extends."""
    for node in ast.walk(tree):
        if kind == "fixture" and isinstance(node, ast.arg) and node.arg == name:
            return True
        if kind == "fixture" and isinstance(node, ast.Call) and _decorator_name(node.func) in _REQUESTS:
            if any(isinstance(a, ast.Constant) and a.value == name for a in node.args):
                return True
        if kind == "property" and isinstance(node, ast.Attribute) and node.attr == name:
            return True
        if kind == "class" and isinstance(node, ast.Name) and node.id == name:
            return True  # built or extended: a helper named Test*, not a test class
    return False


def _has_tests(node: ast.ClassDef) -> bool:
    return any(
        isinstance(i, (ast.FunctionDef, ast.AsyncFunctionDef)) and i.name.startswith("test")
        for i in node.body
    )


def _never_collected(tree: ast.AST) -> list[Shadow]:
    found: list[Shadow] = []
    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            prefix = "Test" if isinstance(node, ast.ClassDef) else "test"
            if not node.name.isascii() and ascii_skeleton(node.name).startswith(prefix):
                found.append(Shadow("look-alike", node.name, node.lineno, node.lineno))
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test") and _has_tests(node):
            if any(_decorator_name(b) == "TestCase" for b in node.bases):
                continue  # unittest collects its own classes, constructor or not
            helper = _asked_for(tree, node.name, "class")  # listed, left alone
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in ("__init__", "__new__"):
                    found.append(Shadow("init", node.name, item.lineno, node.lineno, helper))
            for deco in node.decorator_list:
                if _makes_dataclass(deco):
                    shadow = Shadow(
                        "dataclass", node.name, deco.lineno, node.lineno, helper, *_decorator_cols(deco)
                    )
                    found.append(shadow)
            if not _constructs(node, {}, set()):
                # Red team 25's constructor, one class up: `class TestX(Base)` where Base has one.
                for base in node.bases:
                    if isinstance(base, ast.Name) and base.id in classes and base.id != node.name:
                        if _constructs(classes[base.id], classes, {node.name}):
                            cols = _cols(base) if base.lineno == base.end_lineno else (0, 0)
                            found.append(
                                Shadow(
                                    "inherits", node.name, base.lineno, node.lineno, helper, *cols, base.id
                                )
                            )
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            for deco in node.decorator_list:
                kind = _HIDING_DECORATORS.get(_decorator_name(deco))
                autouse = isinstance(deco, ast.Call) and any(k.arg == "autouse" for k in deco.keywords)
                if kind is None or autouse:
                    continue
                if not _asked_for(tree, node.name, kind):
                    found.append(
                        Shadow(kind, node.name, deco.lineno, node.lineno, False, *_decorator_cols(deco))
                    )
    return found


def _cols(node: ast.expr) -> tuple[int, int]:
    return node.col_offset, node.end_col_offset or node.col_offset


def shadows(tree: ast.AST) -> list[Shadow]:
    """Every statement of ``tree`` (a test module) hiding a ``test*`` function defined before it in the same
    module or class body, and every test pytest never collects (`_never_collected`), in source order."""
    found: list[Shadow] = _never_collected(tree)
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]
    for scope in scopes:
        defined: dict[str, int] = {}
        for node in getattr(scope, "body", []):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                if node.name in defined:
                    found.append(Shadow("redefines", node.name, node.lineno, defined[node.name]))
                defined[node.name] = node.lineno
            elif (recoded := _recode(node)) is not None:
                found.append(recoded)
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


def _recode(node: ast.stmt) -> Shadow | None:
    """``test_x.__code__ = other.__code__`` or ``setattr(test_x, "__code__", ...)`` (red team 27, F5): the
    function object pytest collects is the test's, the code it runs another's."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Attribute) and target.attr == "__code__":
            name = _decorator_name(target.value)
            if name.startswith("test") and target.lineno == target.end_lineno:
                return Shadow("recode", name, target.lineno, target.lineno, False, *_cols(target))
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        call = node.value
        if _decorator_name(call.func) == "setattr" and len(call.args) >= 2:
            name = _decorator_name(call.args[0])
            attr = call.args[1]
            if name.startswith("test") and isinstance(attr, ast.Constant) and attr.value == "__code__":
                return Shadow("recode", name, call.lineno, call.lineno, False, *_cols(call.func), "setattr")
    return None


def _span(lines: list[str], shadow: Shadow) -> tuple[int, int]:
    """``shadow``'s columns as character offsets in its line: ast gives UTF-8 byte offsets, and the line may
    hold other non-ASCII text before the target."""
    raw = lines[shadow.line - 1].encode("utf-8")
    return len(raw[: shadow.col].decode("utf-8")), len(raw[: shadow.end_col].decode("utf-8"))


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
    path = within(copy, rel)
    if path is None:
        return []
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
        if shadow.wraps and shadow.kind in ("init", "dataclass", "inherits"):
            continue  # a helper class the module builds: listed, not undone
        if shadow.kind in ("init", "look-alike"):
            source = lines[shadow.line - 1] if shadow.line <= len(lines) else ""
            name = "__init__|__new__" if shadow.kind == "init" else re.escape(shadow.name)
            match = re.search(rf"\b(?:def|class)\s+({name})\b", source)
            if match is None:
                continue
            new = (
                f"_constructor_hidden_L{shadow.line}"
                if shadow.kind == "init"
                else f"{ascii_skeleton(shadow.name)}__look_alike_L{shadow.line}"
            )
            edits.append((shadow.line, match.start(1), match.end(1), new))
        elif shadow.kind in ("dataclass", "fixture", "property"):
            start, end = _span(lines, shadow)
            # A decorator over several lines keeps them: the no-op goes in front and the rest is not run.
            new = "(lambda _decorated: _decorated)" + ("" if end > start else " if True else ")
            edits.append((shadow.line, start, end, new))
        elif shadow.kind == "recode":
            # The assignment binds a throwaway name; setattr becomes a call that does nothing.
            new = (
                "(lambda *_ignored: None)"
                if shadow.via == "setattr"
                else f"_{shadow.name}__recode_L{shadow.line}"
            )
            edits.append((shadow.line, *_span(lines, shadow), new))
        elif shadow.kind == "inherits":
            if shadow.end_col <= shadow.col:
                continue
            # The base without its constructor, as pytest wants a test class (line numbers kept).
            new = (
                f"type({shadow.via!r}, ({shadow.via},), "
                '{"__init__": object.__init__, "__new__": object.__new__})'
            )
            edits.append((shadow.line, *_span(lines, shadow), new))
        elif shadow.kind == "redefines":
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
            new = "[]" if shadow.kind == "del" else f"_{shadow.name}__rebound_L{shadow.line}"
            edits.append((shadow.line, *_span(lines, shadow), new))
        undone.append(shadow)
    if not edits:
        return []
    # A name the module already uses would hide the renamed test again (red team 32: a passing
    # `test_x__hidden_L1` written beside the failing `test_x` it redefines).
    taken = set(re.findall(r"\w+", text))
    unused: dict[str, str] = {}
    for *_, new in edits:
        for name in re.findall(r"\b\w+_L\d+\b", new):
            if name not in unused:
                fresh = name
                while fresh in taken:
                    fresh += "_"
                taken.add(fresh)
                unused[name] = fresh
    edits = [
        (line, start, end, re.sub(r"\w+", lambda m: unused.get(m.group(0), m.group(0)), new))
        for line, start, end, new in edits
    ]
    for line, start, end, new in sorted(edits, reverse=True):
        text_line = lines[line - 1]
        lines[line - 1] = text_line[:start] + new + text_line[end:]
    # The copy is the grader's own (made from the pristine copy); the run sees it read-only.
    path.unlink()
    path.write_text("".join(lines), encoding="utf-8")
    return undone


def revive_file_name(copy: Path, rel: str) -> str | None:
    """Copy ``copy/rel`` (a test module whose file name only reads as one: look-alike letters, characters that
    draw nothing) to its ASCII name beside it, or to another name pytest collects when that one is taken, so
    pytest collects it; the new relative path, or None when the path leads out or the file is unsafe."""
    path = within(copy, rel)
    if path is None:
        return None
    spelled = ascii_skeleton(path.name)
    target = path.with_name(spelled)
    if target == path:
        return None
    stem = spelled.removesuffix(".py")
    # Its ASCII name may be taken (red team 32: an honest passing module under it): another that pytest
    # collects, never one that exists.
    for n in range(1, 100):
        if not (target.exists() or target.is_symlink()):
            break
        target = path.with_name(
            f"{stem}_look_alike_{n}.py" if stem.startswith("test_") else f"test_{stem}_{n}.py"
        )
    else:
        return None
    try:
        data = read_bytes(path, cap=_CAP, root=copy)
    except OSError:
        return None
    target.write_bytes(data)
    return target.relative_to(copy).as_posix()


def enter_folder(copy: Path, rel: str) -> str | None:
    """Rename folder ``copy/rel`` (``tests/build``, ``tests/.slow``: pytest's default ``norecursedirs``) so
    that pytest collects the tests below it; the new relative path, or None (a link, not a folder, name
    taken)."""
    path = within(copy, rel)
    if path is None:  # only the grader's own copy is ever changed, never a place a path leads out to
        return None
    # `.slow` → `slow__entered`: pytest skips every dot folder.
    target = path.with_name(f"{path.name.lstrip('.')}__entered")
    if path.is_symlink() or not path.is_dir() or target.exists() or target.is_symlink():
        return None
    path.rename(target)
    marker = target / "pyvenv.cfg"  # pytest also skips any folder holding one, whatever its name
    if marker.is_file() and not marker.is_symlink():
        marker.rename(target / "pyvenv.cfg__entered")
    return target.relative_to(copy).as_posix()
