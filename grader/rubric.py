"""Load, validate and score a rubric YAML (version 1).

Validation happens before any grading, so a typo in the hiring team's YAML costs seconds, not a grading run:
every problem is a ``BadInput("rubric.yaml:LINE: message")``. Level expressions and evidence templates are
Jinja2 over the facts of the row's check, compiled in a SandboxedEnvironment and restricted further to a small
whitelist of syntax (see ``_ALLOWED_NODES``): no calls, no ``**``, no underscore names, no repetition of
strings or lists. docs/rubric.md documents the same rules.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from jinja2 import StrictUndefined, nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.parser import Parser
from jinja2.sandbox import SandboxedEnvironment

from grader.checks import Check, CheckResult, registry
from grader.details import row_details
from grader.errors import BadInput, describe

__all__ = [
    "Row",
    "RowScore",
    "Rubric",
    "default_rubric_path",
    "load_rubric",
    "plain_number",
    "score",
    "totals",
]

_EXTENDS = "extends"
_TOP_KEYS = {"version", "name", "scale", "thresholds", "rows", _EXTENDS}
_TOP_REQUIRED = ("version", "name", "rows")
_ROW_KEYS = {"id", "title", "weight", "check", "levels", "evidence"}
_ROW_REQUIRED = ("id", "title", "weight", "check", "levels")
_DEFAULT_SCALE = (0, 3)
_DEFAULT_EVIDENCE = "{{ summary }}"
_ROW_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

# The syntax a level expression or an evidence template may use. Everything else (calls, `**`, slices,
# dict literals, `{% set %}`, macros, imports...) is refused at load time: rubric YAML comes from a file
# anyone can edit, and an expression runs once per graded submission.
_ALLOWED_NODES = (
    nodes.Template,
    nodes.Output,
    nodes.TemplateData,
    nodes.If,
    nodes.For,
    nodes.Name,
    nodes.Const,
    nodes.List,
    nodes.Tuple,
    nodes.Compare,
    nodes.Operand,
    nodes.And,
    nodes.Or,
    nodes.Not,
    nodes.Neg,
    nodes.Pos,
    nodes.Add,
    nodes.Sub,
    nodes.Mul,
    nodes.Div,
    nodes.FloorDiv,
    nodes.Mod,
    nodes.Concat,
    nodes.CondExpr,
    nodes.Getattr,
    nodes.Getitem,
    nodes.Filter,
    nodes.Test,
)
_ALLOWED_FILTERS = frozenset(
    {"abs", "default", "first", "float", "int", "join", "last", "length", "lower", "max", "min", "round"}
    | {"sum", "upper", "count", "string", "trim"}
)
_ALLOWED_TESTS = frozenset(
    {"defined", "undefined", "none", "number", "string", "boolean", "true", "false", "even", "odd"}
    | {"eq", "ne", "lt", "le", "gt", "ge", "in"}
)


class _Env(SandboxedEnvironment):
    """The sandbox, plus: `*` never repeats a string or a list (a short expression could ask for GBs)."""

    intercepted_binops = frozenset({"*"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*" and not (_is_number(left) and _is_number(right)):
            raise SecurityError("'*' only multiplies numbers")
        return super().call_binop(context, operator, left, right)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_ENV = _Env(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)


@dataclass(frozen=True)
class Row:
    """One rubric row: levels map a score (high to low) to a Jinja2 expression string."""

    id: str
    title: str
    weight: float
    check: str
    levels: dict[int, str]
    evidence: str
    line: int
    level_lines: dict[int, int] = field(default_factory=dict, compare=False)
    # The file each line is in: a rubric that extends another holds rows and levels from both files.
    path: str = field(default="", compare=False)
    level_paths: dict[int, str] = field(default_factory=dict, compare=False)

    def where(self, level: int | None = None) -> str:
        """``file:line`` of the row, or of one of its levels."""
        if level is not None and level in self.level_lines:
            return f"{self.level_paths.get(level, self.path)}:{self.level_lines[level]}"
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Rubric:
    name: str
    version: int
    scale: tuple[int, int]
    thresholds: dict[str, float]
    rows: tuple[Row, ...]
    path: Path
    sha256: str
    # The bytes ``sha256`` names and a stored run keeps: the file itself, or for a rubric that extends
    # another, the resolved rubric as one self-contained YAML document (a copy must load on its own).
    source: bytes = field(default=b"", repr=False, compare=False)

    @property
    def max(self) -> int:
        return self.scale[1]

    def reference(self) -> dict[str, str]:
        """The report's ``rubric`` object: which rubric, exactly, produced these scores."""
        return {"name": self.name, "sha256": self.sha256, "path": str(self.path)}


@dataclass
class RowScore:
    id: str
    title: str
    weight: float
    score: int | None
    max: int
    status: str  # "scored" | "manual" | "not-assessable"
    evidence: str
    details: list[str] = field(default_factory=list)

    @property
    def auto(self) -> bool:
        return self.status == "scored"

    def as_dict(self) -> dict[str, Any]:
        """The report's row object, keys in the order docs/design.md shows them."""
        return {
            "id": self.id,
            "title": self.title,
            "weight": plain_number(self.weight),
            "score": self.score,
            "max": self.max,
            "auto": self.auto,
            "status": self.status,
            "evidence": self.evidence,
            "details": list(self.details),
        }


# --------------------------------------------------------------------------------------------- loading


def default_rubric_path() -> Path:
    """The packaged default rubric (a wheel's grader/_rubric/), else the repo's rubric/default.yaml."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_rubric" / "default.yaml", here.parent / "rubric" / "default.yaml"):
        if candidate.is_file():
            return candidate
    raise BadInput("the default rubric is missing from this installation; pass --rubric PATH")


def load_rubric(path: Path | None = None, *, checks: Mapping[str, Check] | None = None) -> Rubric:
    """Read and validate a rubric; ``checks`` (default: the registry) says which check ids and facts exist."""
    path = default_rubric_path() if path is None else Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: rubric file not found; pass an existing YAML file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the rubric: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: the rubric is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    known = registry() if checks is None else dict(checks)
    return _Loader(path, known).load(text, raw)


class _Loc(NamedTuple):
    """Where a YAML node starts: a rubric that extends another is read from two files."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


class _Loader:
    def __init__(self, path: Path, checks: dict[str, Check]) -> None:
        self.path = path
        self.checks = checks
        self.errors: list[tuple[_Loc, str]] = []
        # Names declared under thresholds, valid or not: a bad value is one error, not one per use.
        self.declared: set[str] = set()

    def error(self, at: _Loc, message: str) -> None:
        self.errors.append((at, message))

    def load(self, text: str, raw: bytes) -> Rubric:
        root = self._compose(text, self.path)
        extended = self._extend(root, self.path, (self.path.resolve(),))
        rubric = None
        if extended is not None:  # None: the base could not be read; nothing else can be checked
            source = raw if extended is root else b""
            if extended is not root and not self.errors:
                source = _resolved_yaml(self._value(extended), self.path)
            rubric = self._rubric(extended, hashlib.sha256(source).hexdigest(), source)
        if self.errors:
            # The message is the first problem in file order (one line for whoever shows one); ``problems``
            # lists every one, so nobody fixes them one run at a time. This file's problems come first.
            own = str(self.path)
            ordered = [
                f"{at}: {message}"
                for at, message in sorted(self.errors, key=lambda e: (e[0].path != own, e[0].path, e[0].line))
            ]
            more = len(ordered) - 1
            suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
            raise BadInput(ordered[0] + suffix, problems=tuple(ordered) if more else ())
        assert rubric is not None  # no errors means every part was built
        return rubric

    def _compose(self, text: str, path: Path) -> yaml.Node:
        stream = io.StringIO(text)
        stream.name = str(path)  # every node's mark then names its file
        try:
            node = yaml.compose(stream, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else 1
            problem = exc.problem or exc.context or "invalid YAML"
            raise BadInput(f"{path}:{line}: YAML syntax error: {problem}") from None
        except yaml.YAMLError as exc:
            raise BadInput(f"{path}: YAML error: {exc}") from None
        if node is None:
            raise BadInput(f"{path}:1: the rubric is empty; start from rubric/default.yaml")
        return node

    # -- extends: BASE (a rubric that is another one with a few keys changed)

    def _extend(self, root: yaml.Node, path: Path, chain: tuple[Path, ...]) -> yaml.Node | None:
        """``root`` laid over the rubric its ``extends`` names (itself resolved first); ``root`` without one.

        Every key given replaces the base's, except ``thresholds`` (merged name by name) and ``rows``
        (a row whose id the base has is merged key by key, its ``levels`` level by level; a new id is added
        at the end). Nodes keep their own file, so a problem in either file is reported at its own line.
        None when the base cannot be read (the error is recorded)."""
        if not isinstance(root, yaml.MappingNode):
            return root
        found = [(k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == _EXTENDS]
        if not found:
            return root
        key_node, value_node = found[0]
        own = yaml.MappingNode(
            root.tag,
            [(k, v) for k, v in root.value if k is not key_node],
            start_mark=root.start_mark,
            end_mark=root.end_mark,
        )
        self._drop_repeated_rows(own)
        for name in ("version", "name"):  # a rubric that extends another still says what it is
            if not any(isinstance(k, yaml.ScalarNode) and k.value == name for k, _ in own.value):
                self.error(_at(root), f"a rubric with {_EXTENDS}: needs its own {name!r}")
        target = value_node.value if isinstance(value_node, yaml.ScalarNode) else None
        if not isinstance(target, str) or not target.strip() or value_node.tag != "tag:yaml.org,2002:str":
            self.error(_at(value_node), f"{_EXTENDS} must be the path of a rubric file, e.g. default.yaml")
            return None
        base_path = Path(target) if Path(target).is_absolute() else path.parent / target
        if base_path.resolve() in chain:
            self.error(_at(value_node), f"{_EXTENDS}: {target} leads back to this file (a loop of extends)")
            return None
        try:
            text = base_path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            self.error(
                _at(value_node),
                f"{_EXTENDS}: {base_path} not found (relative paths start at this file's folder)",
            )
            return None
        except (OSError, UnicodeDecodeError) as exc:
            self.error(_at(value_node), f"{_EXTENDS}: cannot read {base_path} as UTF-8 text: {exc}")
            return None
        base = self._extend(self._compose(text, base_path), base_path, (*chain, base_path.resolve()))
        if base is None:
            return None
        if not isinstance(base, yaml.MappingNode):
            self.error(_at(value_node), f"{_EXTENDS}: {base_path} is not a rubric (a mapping of keys)")
            return None
        return _overlay(base, own, {"thresholds": _overlay, "rows": _overlay_rows})

    def _drop_repeated_rows(self, own: yaml.MappingNode) -> None:
        """A row id given twice in an extending file is reported here: merged, the second would hide it."""
        for key_node, rows in own.value:
            if _key(key_node) != "rows" or not isinstance(rows, yaml.SequenceNode):
                continue
            first: dict[str, _Loc] = {}
            kept = []
            for row in rows.value:
                row_id = _row_id(row)
                if row_id is not None and row_id in first:
                    self.error(
                        _at(row), f"duplicate row id {row_id!r} (first defined on line {first[row_id].line})"
                    )
                    continue
                if row_id is not None:
                    first[row_id] = _at(row)
                kept.append(row)
            rows.value = kept

    # -- node helpers: every value keeps its line so errors can point at it

    def _value(self, node: yaml.Node) -> Any:
        return yaml.SafeLoader("").construct_object(node, deep=True)

    def _mapping(self, node: yaml.Node, what: str) -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
        if not isinstance(node, yaml.MappingNode):
            self.error(_at(node), f"{what} must be a mapping of keys to values")
            return None
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self._value(key_node)
            key_text = str(key) if not isinstance(key, bool) else str(key).lower()
            if key_text in out:
                self.error(_at(key_node), f"duplicate key {key_text!r} in {what}")
                continue
            out[key_text] = (key_node, value_node)
        return out

    def _keys(
        self,
        items: dict[str, tuple[yaml.Node, yaml.Node]],
        allowed: set[str],
        required: tuple[str, ...],
        where: str,
        line: _Loc,
    ) -> None:
        explained: set[str] = set()  # required keys an unknown key was probably meant to be
        for key, (key_node, _) in items.items():
            if key in allowed:
                continue
            # Keys given in the same file are not what it meant; one inherited through extends may be.
            given = {k for k, (n, _) in items.items() if n.start_mark.name == key_node.start_mark.name}
            guess = difflib.get_close_matches(key, sorted(allowed - given), n=1, cutoff=0.6)
            if guess:
                explained.add(guess[0])
                self.error(_at(key_node), f"unknown key {key!r} in {where} (did you mean {guess[0]!r}?)")
            else:
                self.error(
                    _at(key_node), f"unknown key {key!r} in {where}; allowed: {', '.join(sorted(allowed))}"
                )
        for key in required:
            if key not in items and key not in explained:
                self.error(line, f"{where} is missing the required key {key!r}")

    # -- the document

    def _rubric(self, root: yaml.Node, sha256: str, source: bytes) -> Rubric | None:
        top = self._mapping(root, "the rubric")
        if top is None:
            return None
        self._keys(top, _TOP_KEYS, _TOP_REQUIRED, "the rubric", _at(root))

        version = None
        if "version" in top:
            node = top["version"][1]
            version = self._value(node)
            if version != 1 or isinstance(version, bool):
                self.error(_at(node), f"unsupported rubric version {version!r}; use version: 1")

        name = ""
        if "name" in top:
            node = top["name"][1]
            name = self._value(node)
            if not isinstance(name, str) or not name.strip():
                self.error(_at(node), "name must be a non-empty string")
                name = ""

        scale = self._scale(top["scale"][1]) if "scale" in top else _DEFAULT_SCALE
        thresholds = self._thresholds(top["thresholds"][1]) if "thresholds" in top else {}
        rows = self._rows(top["rows"][1], scale or _DEFAULT_SCALE, thresholds) if "rows" in top else []
        if self.errors or scale is None:
            return None
        return Rubric(
            name=name,
            version=1,
            scale=scale,
            thresholds=thresholds,
            rows=tuple(rows),
            path=self.path,
            sha256=sha256,
            source=source,
        )

    def _scale(self, node: yaml.Node) -> tuple[int, int] | None:
        value = self._value(node)
        ok = (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and 0 <= value[0] < value[1]
        )
        if not ok:
            self.error(_at(node), f"scale must be [lowest, highest] whole numbers like [0, 3]; got {value!r}")
            return None
        return (value[0], value[1])

    def _thresholds(self, node: yaml.Node) -> dict[str, float]:
        items = self._mapping(node, "thresholds")
        out: dict[str, float] = {}
        for key, (key_node, value_node) in (items or {}).items():
            self.declared.add(key)
            value = self._value(value_node)
            if not _IDENT.match(key):
                self.error(_at(key_node), f"threshold name {key!r} must be letters, digits and underscores")
            elif not _is_number(value) or not math.isfinite(value):
                self.error(_at(value_node), f"threshold {key!r} must be a number; got {value!r}")
            else:
                out[key] = value
        return out

    def _rows(self, node: yaml.Node, scale: tuple[int, int], thresholds: dict[str, float]) -> list[Row]:
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            self.error(_at(node), "rows must be a non-empty list of rows (each with id, title, weight, ...)")
            return []
        rows: list[Row] = []
        seen: dict[str, _Loc] = {}
        for row_node in node.value:
            row = self._row(row_node, scale, thresholds)
            if row is None:
                continue
            at = _Loc(row.path, row.line)
            if row.id in seen:
                first = f"line {seen[row.id].line}" if seen[row.id].path == at.path else str(seen[row.id])
                self.error(at, f"duplicate row id {row.id!r} (first defined on {first})")
                continue
            seen[row.id] = at
            rows.append(row)
        return rows

    def _row(self, node: yaml.Node, scale: tuple[int, int], thresholds: dict[str, float]) -> Row | None:
        line = _at(node)
        items = self._mapping(node, "a row")
        if items is None:
            return None
        label = "row"
        row_id = None
        if "id" in items:
            id_node = items["id"][1]
            row_id = self._value(id_node)
            if not isinstance(row_id, str) or not _ROW_ID.match(row_id):
                self.error(_at(id_node), f"row id {row_id!r} must be lowercase letters, digits and dashes")
                row_id = None
            else:
                label = f"row {row_id!r}"
        n_before = len(self.errors)
        self._keys(items, _ROW_KEYS, _ROW_REQUIRED, label, line)

        title = ""
        if "title" in items:
            title_node = items["title"][1]
            title = self._value(title_node)
            if not isinstance(title, str) or not title.strip():
                self.error(_at(title_node), f"{label}: title must be a non-empty string")

        weight = 0.0
        if "weight" in items:
            weight_node = items["weight"][1]
            weight = self._value(weight_node)
            if not _is_number(weight) or not math.isfinite(weight) or weight <= 0:
                self.error(_at(weight_node), f"{label}: weight must be a positive number; got {weight!r}")

        check: Check | None = None
        if "check" in items:
            check_node = items["check"][1]
            check_id = self._value(check_node)
            check = self.checks.get(check_id) if isinstance(check_id, str) else None
            if check is None:
                known = ", ".join(self.checks) or "none registered"
                self.error(_at(check_node), f"{label}: unknown check {check_id!r}; known checks: {known}")

        names = set(check.facts) if check is not None else None
        levels: dict[int, str] = {}
        level_lines: dict[int, _Loc] = {}
        if "levels" in items:
            key_node, levels_node = items["levels"]
            levels, level_lines = self._levels(levels_node, _at(key_node), label, scale, names, thresholds)

        evidence = _DEFAULT_EVIDENCE
        if "evidence" in items:
            evidence_node = items["evidence"][1]
            evidence = self._value(evidence_node)
            if not isinstance(evidence, str):
                self.error(_at(evidence_node), f"{label}: evidence must be a template string")
            else:
                self._check_jinja(
                    evidence, _at(evidence_node), f"{label} evidence", names, thresholds, template=True
                )

        if len(self.errors) > n_before or row_id is None:
            return None
        assert check is not None  # a missing check was recorded above
        return Row(
            id=row_id,
            title=title.strip(),
            weight=weight,
            check=check.id,
            levels=levels,
            evidence=evidence,
            line=line.line,
            level_lines={level: at.line for level, at in level_lines.items()},
            path=line.path,
            level_paths={level: at.path for level, at in level_lines.items()},
        )

    def _levels(
        self,
        node: yaml.Node,
        key_line: _Loc,
        label: str,
        scale: tuple[int, int],
        names: set[str] | None,
        thresholds: dict[str, float],
    ) -> tuple[dict[int, str], dict[int, _Loc]]:
        items = self._mapping(node, f"{label} levels")
        if items is None:
            return {}, {}
        levels: dict[int, str] = {}
        lines: dict[int, _Loc] = {}
        low, high = scale
        for key, (key_node, value_node) in items.items():
            level = int(key) if key.isdigit() else None
            if level is None or not low <= level <= high:
                self.error(_at(key_node), f"{label}: level {key!r} is outside the scale {low}-{high}")
                continue
            value = self._value(value_node)
            if isinstance(value, bool):
                # A bare YAML true/false is that expression.
                value = "true" if value else "false"
            if not isinstance(value, str) or not value.strip():
                self.error(_at(value_node), f"{label}: level {level} must be a Jinja2 expression string")
                continue
            self._check_jinja(value, _at(value_node), f"{label} level {level}", names, thresholds)
            levels[level] = value
            lines[level] = _at(value_node)
        if str(low) not in items:
            self.error(key_line, f"{label}: level {low} is missing; add `{low}: true` as the fallback")
        order = sorted(levels, reverse=True)
        return {k: levels[k] for k in order}, {k: lines[k] for k in order}

    def _check_jinja(
        self,
        source: str,
        line: _Loc,
        where: str,
        names: set[str] | None,
        thresholds: dict[str, float],
        *,
        template: bool = False,
    ) -> None:
        try:
            tree = _ENV.parse(source) if template else _parse_expression(source)
        except TemplateSyntaxError as exc:
            self.error(line, f"{where}: invalid expression: {exc.message}")
            return
        problem = _unsafe(tree)
        if problem:
            self.error(line, f"{where}: unsafe expression: {problem}")
            return
        if names is None:  # the check is unknown; that error is already recorded
            return
        for name in _free_names(tree):
            if name == "thresholds":
                continue
            if name not in names:
                self.error(
                    line,
                    f"{where}: {name!r} is not a fact of this check; "
                    f"facts: {', '.join(sorted(names))}, thresholds",
                )
        for used in _threshold_refs(tree):
            if used not in thresholds and used not in self.declared:
                defined = ", ".join(sorted(thresholds)) or "none"
                self.error(line, f"{where}: thresholds.{used} is not defined under thresholds: ({defined})")


def _parse_expression(source: str) -> nodes.Expr:
    # The same parse compile_expression does, so what is validated is exactly what is evaluated.
    parser = Parser(_ENV, source, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("unexpected text after the expression", parser.stream.current.lineno)
    return expr


def _at(node: yaml.Node) -> _Loc:
    return _Loc(node.start_mark.name, node.start_mark.line + 1)


def _key(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _overlay(base: yaml.Node, top: yaml.Node, nested: Mapping[str, Any] | None = None) -> yaml.Node:
    """``top``'s keys replace ``base``'s (``nested`` names keys merged by their own rule instead). A key
    ``top`` repeats is kept twice, so validation still reports the duplicate."""
    if not isinstance(base, yaml.MappingNode) or not isinstance(top, yaml.MappingNode):
        return top
    pairs = list(base.value)
    index = {_key(k): i for i, (k, _) in enumerate(pairs) if _key(k) is not None}
    replaced: set[str] = set()
    for key_node, value_node in top.value:
        key = _key(key_node)
        if key is None or key not in index or key in replaced:
            pairs.append((key_node, value_node))
            continue
        merge = (nested or {}).get(key)
        old = pairs[index[key]][1]
        pairs[index[key]] = (key_node, merge(old, value_node) if merge else value_node)
        replaced.add(key)
    return yaml.MappingNode(top.tag, pairs, start_mark=top.start_mark, end_mark=top.end_mark)


def _overlay_rows(base: yaml.Node, top: yaml.Node) -> yaml.Node:
    """Rows matched by id: a known id is merged into the base's row (``levels`` level by level), a new id
    (or a repeated one, for validation to report) is added at the end."""
    if not isinstance(base, yaml.SequenceNode) or not isinstance(top, yaml.SequenceNode):
        return top
    rows = list(base.value)
    index: dict[str, int] = {}
    for i, row in enumerate(rows):
        row_id = _row_id(row)
        if row_id is not None:
            index.setdefault(row_id, i)
    merged: set[str] = set()
    for row in top.value:
        row_id = _row_id(row)
        if row_id is None or row_id not in index or row_id in merged:
            rows.append(row)
            continue
        rows[index[row_id]] = _overlay(rows[index[row_id]], row, {"levels": _overlay})
        merged.add(row_id)
    return yaml.SequenceNode(top.tag, rows, start_mark=top.start_mark, end_mark=top.end_mark)


def _row_id(row: yaml.Node) -> str | None:
    if not isinstance(row, yaml.MappingNode):
        return None
    return next((_key(v) for k, v in row.value if _key(k) == "id"), None)


def _resolved_yaml(data: Any, path: Path) -> bytes:
    header = (
        f"# {path.name} resolved over the rubric it extends: a self-contained copy written by the grader.\n"
    )
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10_000, default_flow_style=False)
    return (header + body).encode("utf-8")


# ---------------------------------------------------------------------------------- expression safety


def _walk(tree: nodes.Node) -> list[nodes.Node]:
    # find_all() skips the node it starts from, and a bare expression's root is often the unsafe part.
    return [tree, *tree.find_all(nodes.Node)]


def _unsafe(tree: nodes.Node) -> str | None:
    for node in _walk(tree):
        if isinstance(node, nodes.Call):
            return "function calls are not allowed"
        if isinstance(node, nodes.Pow):
            return "'**' is not allowed"
        if not isinstance(node, _ALLOWED_NODES):
            return f"{type(node).__name__.lower()} syntax is not allowed"
        if isinstance(node, nodes.Name) and node.name.startswith("_"):
            return f"the name {node.name!r} starts with an underscore"
        if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            return f"the attribute {node.attr!r} starts with an underscore"
        if isinstance(node, nodes.Getitem):
            key = node.arg
            if not isinstance(key, nodes.Const):
                return "only a literal key may index a value"
            if isinstance(key.value, str) and key.value.startswith("_"):
                return f"the key {key.value!r} starts with an underscore"
        if isinstance(node, nodes.Filter) and node.name not in _ALLOWED_FILTERS:
            return f"the filter {node.name!r} is not allowed; allowed: {', '.join(sorted(_ALLOWED_FILTERS))}"
        if isinstance(node, nodes.Test) and node.name not in _ALLOWED_TESTS:
            return f"the test {node.name!r} is not allowed; allowed: {', '.join(sorted(_ALLOWED_TESTS))}"
        if isinstance(node, (nodes.Filter, nodes.Test)) and (node.dyn_args or node.dyn_kwargs):
            return "*args/**kwargs are not allowed"
    return None


def _free_names(tree: nodes.Node) -> list[str]:
    names = [n for n in _walk(tree) if isinstance(n, nodes.Name)]
    bound = {n.name for n in names if n.ctx == "store"} | {"loop"}
    seen: list[str] = []
    for n in names:
        if n.ctx == "load" and n.name not in bound and n.name not in seen:
            seen.append(n.name)
    return seen


def _threshold_refs(tree: nodes.Node) -> list[str]:
    refs: list[str] = []
    for node in _walk(tree):
        if isinstance(node, nodes.Getattr):
            if isinstance(node.node, nodes.Name) and node.node.name == "thresholds":
                refs.append(node.attr)
            continue
        if not isinstance(node, nodes.Getitem):
            continue
        target = node.node
        if (
            isinstance(target, nodes.Name)
            and target.name == "thresholds"
            and isinstance(node.arg, nodes.Const)
        ):
            refs.append(str(node.arg.value))
    return refs


# ------------------------------------------------------------------------------------------- scoring


def score(rubric: Rubric, results: Mapping[str, CheckResult]) -> list[RowScore]:
    """Score every row from its check's result, in rubric order. Never raises for a bad fact value."""
    return [_score_row(rubric, row, results.get(row.check)) for row in rubric.rows]


def _score_row(rubric: Rubric, row: Row, result: CheckResult | None) -> RowScore:
    def make(status: str, value: int | None, evidence: str, details: list[str]) -> RowScore:
        return RowScore(row.id, row.title, row.weight, value, rubric.max, status, evidence, details)

    if result is None:
        return make("not-assessable", None, f"not assessable: check {row.check!r} did not run", [])
    details = row_details(result.details, result.findings)
    if result.not_assessable is not None:
        return make("not-assessable", None, f"not assessable: {result.not_assessable}", details)
    if result.manual is not None:
        return make("manual", None, result.manual, details)
    if result.crashed is not None:
        # Left out of the total, a crash would be a lever: a file built to crash a check removes the rows it
        # would fail (docs/security.md). Scored 0, the reason in the evidence, for a reviewer to look at.
        evidence = f"{result.crashed}; scored 0 so that a crash never raises the total: check by hand"
        return make("scored", 0, evidence, details)

    context = {**result.facts, "thresholds": dict(rubric.thresholds)}
    where = row.where()
    chosen: int | None = None
    for level, expression in row.levels.items():
        try:
            if _ENV.compile_expression(expression, undefined_to_none=False)(**context):
                chosen = level
                break
        except Exception as exc:  # any evaluation failure is this row's, never the run's
            where = row.where(level)
            reason = f"row {row.id!r} ({where}) level {level}: {describe(exc, limit=None)}"
            return make("not-assessable", None, f"not assessable: {reason}", details)
    if chosen is None:
        reason = f"no level of row {row.id!r} ({where}) is true for these facts"
        return make("not-assessable", None, f"not assessable: {reason}", details)
    try:
        evidence = _ENV.from_string(row.evidence).render(**context)
    except Exception as exc:  # a template problem marks the row, not the run
        reason = f"row {row.id!r} ({where}) evidence: {describe(exc, limit=None)}"
        return make("not-assessable", None, f"not assessable: {reason}", details)
    return make("scored", chosen, " ".join(evidence.split()), details)


def totals(rows: list[RowScore]) -> dict[str, float | int]:
    """Weighted points over scored rows only; manual and not-assessable rows count toward neither side."""
    points = sum(r.score * r.weight for r in rows if r.status == "scored" and r.score is not None)
    maximum = sum(r.max * r.weight for r in rows if r.status == "scored")
    percent = round(100 * points / maximum, 1) if maximum else 0
    return {"points": plain_number(points), "max": plain_number(maximum), "percent": percent}


def plain_number(value: float) -> int | float:
    # Weights are usually whole numbers; keep the report free of "3.0".
    return int(value) if float(value).is_integer() else value
