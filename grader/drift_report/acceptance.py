"""The hiring team's acceptance rule for a model switch (`grade drift --accept FILE`): read and validate it.

The rule is data the hiring team owns, so it lives in YAML (default: `rubric/drift-acceptance.yaml`), read
with `yaml.safe_load`'s composer so every problem points at its `file:line`. Every problem is reported at
once (one `grade: error:` line each, exit 2), as for the rubric.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grader.errors import BadInput

__all__ = ["CLASSES", "CONTRACT_CLASSES", "Acceptance", "default_acceptance_path", "load_acceptance"]

# What can go wrong in one run of the agent, as the report and the rule name it. The first five break the
# agent's output contract (they count towards max_violation_rate); the others are behaviour differences.
CONTRACT_CLASSES = ("unparseable", "schema", "made_up_default", "wrong_label", "timeout")
CLASSES = (*CONTRACT_CLASSES, "loud", "termination", "tool_shape")
_RATES = ("max_violation_rate", "max_changed_rate", "max_loud_rate")
_KEYS = ("version", "name", "zero", *_RATES)
_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Acceptance:
    """A validated rule. A rate left out of the file is not checked (None)."""

    path: str
    sha256: str
    name: str
    max_violation_rate: float | None
    max_changed_rate: float | None
    max_loud_rate: float | None
    zero: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "name": self.name,
            "max_violation_rate": self.max_violation_rate,
            "max_changed_rate": self.max_changed_rate,
            "max_loud_rate": self.max_loud_rate,
            "zero": list(self.zero),
        }


def default_acceptance_path() -> Path:
    """The packaged rule (a wheel's grader/_rubric/), else the repo's rubric/drift-acceptance.yaml."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (
        here / "_rubric" / "drift-acceptance.yaml",
        here.parent / "rubric" / "drift-acceptance.yaml",
    ):
        if candidate.is_file():
            return candidate
    raise BadInput("the default acceptance rule is missing from this installation; pass --accept FILE")


def load_acceptance(path: Path | None = None) -> Acceptance:
    """Read and validate an acceptance rule; raises BadInput with one `file:line: ...` line per problem."""
    path = default_acceptance_path() if path is None else Path(path)
    try:
        if path.is_symlink() or not path.is_file():
            raise BadInput(f"--accept {path}: no such file; give the acceptance rule's YAML file")
        raw = path.read_bytes()[: _MAX_BYTES + 1]
    except OSError as exc:
        raise BadInput(f"--accept {path}: cannot read it: {exc.strerror}") from None
    if len(raw) > _MAX_BYTES:
        raise BadInput(f"{path}: the acceptance rule is larger than {_MAX_BYTES // 1024} KiB; keep it short")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: the acceptance rule is not UTF-8 text") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise BadInput(
            f"{path}:{line}: YAML syntax error: {exc.problem or exc.context}; fix the syntax"
        ) from None
    except yaml.YAMLError as exc:
        raise BadInput(f"{path}: YAML error: {' '.join(str(exc).split())}") from None
    return _Reader(path, hashlib.sha256(raw).hexdigest()).read(root)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class _Reader:
    def __init__(self, path: Path, sha256: str) -> None:
        self.path = path
        self.sha256 = sha256
        self.problems: list[tuple[int, str]] = []

    def problem(self, node: yaml.Node, message: str) -> None:
        self.problems.append((_line(node), message))

    def read(self, root: yaml.Node | None) -> Acceptance:
        if root is None:
            raise BadInput(
                f"{self.path}:1: the acceptance rule is empty; start from rubric/drift-acceptance.yaml"
            )
        if not isinstance(root, yaml.MappingNode):
            raise BadInput(
                f"{self.path}:{_line(root)}: the acceptance rule must be a mapping (version: 1, "
                "max_violation_rate, zero, ...)"
            )
        found: dict[str, tuple[yaml.Node, Any]] = {}
        for key_node, value_node in root.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key not in _KEYS:
                self.problem(key_node, f"{key!r} is not an acceptance key; use one of {', '.join(_KEYS)}")
            elif key in found:
                self.problem(key_node, f"{key!r} is given twice; keep one")
            else:
                found[key] = (value_node, yaml.SafeLoader("").construct_object(value_node, deep=True))
        version = found.get("version")
        if version is None:
            self.problems.append((1, "'version' is missing; write 'version: 1' at the top"))
        elif version[1] != 1 or isinstance(version[1], bool):
            self.problem(version[0], f"unsupported version {version[1]!r}; use version: 1")
        name = self._name(found.get("name"))
        rates = {key: self._rate(key, found.get(key)) for key in _RATES}
        zero = self._zero(found.get("zero"))
        if not self.problems and all(rate is None for rate in rates.values()) and not zero:
            self.problems.append(
                (
                    _line(root),
                    "the rule checks nothing; set max_violation_rate, max_changed_rate, max_loud_rate "
                    "or zero",
                )
            )
        if self.problems:
            lines = [f"{self.path}:{line}: {message}" for line, message in sorted(self.problems)]
            more = len(lines) - 1
            suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
            raise BadInput(lines[0] + suffix, problems=tuple(lines) if more else ())
        return Acceptance(
            path=str(self.path),
            sha256=self.sha256,
            name=name,
            max_violation_rate=rates["max_violation_rate"],
            max_changed_rate=rates["max_changed_rate"],
            max_loud_rate=rates["max_loud_rate"],
            zero=zero,
        )

    def _name(self, entry: tuple[yaml.Node, Any] | None) -> str:
        if entry is None:
            return self.path.name
        node, value = entry
        if not isinstance(value, str) or not value.strip():
            self.problem(node, "'name' must be a non-empty string (what this rule is for)")
            return ""
        return value.strip()

    def _rate(self, key: str, entry: tuple[yaml.Node, Any] | None) -> float | None:
        if entry is None:
            return None
        node, value = entry
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            self.problem(node, f"'{key}' must be a fraction from 0 to 1 (0.005 is 0.5%); got {value!r}")
            return None
        return float(value)

    def _zero(self, entry: tuple[yaml.Node, Any] | None) -> tuple[str, ...]:
        if entry is None:
            return ()
        node, value = entry
        if not isinstance(value, list):
            self.problem(node, f"'zero' must be a list of classes, e.g. [made_up_default]; got {value!r}")
            return ()
        classes: list[str] = []
        for item_node, item in zip(node.value, value, strict=True):
            if item not in CLASSES:
                self.problem(item_node, f"{item!r} in 'zero' is not a class; use one of {', '.join(CLASSES)}")
            elif item in classes:
                self.problem(item_node, f"{item!r} is listed twice in 'zero'")
            else:
                classes.append(item)
        return tuple(classes)
