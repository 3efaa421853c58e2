"""The public surface stays thin: each public module says what it exports, and nothing else is public."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import grader

ROOT = Path(grader.__file__).parent
# Modules that run inside the submission's own interpreter or are copied there: not part of the grader's API.
_FOREIGN = {"grader.audit._grader_audit", "grader.audit._grader_pytest", "grader.audit._grader_guard"}


def _public_modules() -> list[str]:
    names = ["grader"]
    for info in pkgutil.walk_packages([str(ROOT)], prefix="grader."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]) or info.name in _FOREIGN:
            continue
        names.append(info.name)
    return sorted(names)


def _top_level_definitions(module_name: str) -> set[str]:
    module = importlib.import_module(module_name)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


@pytest.mark.parametrize("module_name", _public_modules())
def test_module_declares_exactly_its_public_names(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{module_name} has no __all__"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{module_name}.__all__ names what it does not define: {missing}"
    undeclared = sorted(
        name
        for name in _top_level_definitions(module_name)
        if not name.startswith("_") and name not in exported
    )
    assert not undeclared, (
        f"{module_name}: public but not in __all__ (underscore it or export it): {undeclared}"
    )


def test_the_package_itself_exports_only_its_version() -> None:
    assert grader.__all__ == ["__version__"]
