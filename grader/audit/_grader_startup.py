"""The grader's start-up module, copied as ``sitecustomize.py`` into the folder first on ``PYTHONPATH``.

``site`` imports the first ``sitecustomize`` on the path, before any pytest plugin: with this one first, a
``sitecustomize.py`` (or ``usercustomize.py``: ``PYTHONNOUSERSITE`` is set) in the submission never runs.
The submission's tree is not on ``PYTHONPATH`` and the run has ``PYTHONSAFEPATH``, so at start-up nothing
can be imported from it; it joins ``sys.path`` here, *after* the standard library and the venv's packages, so
a ``pytest.py`` or ``pluggy/`` in the checkout cannot stand in for the real ones before the guard loads.
A script run by path (``python tools/x.py``) still finds its siblings: its folder is appended too.

Appending is not enough for the standard library's names (red team 24, F2), so a finder ahead of the path
finder gives *code outside the tree* (pytest, the venv's packages, the standard library itself) the
standard library's module for them, never the tree's:

* modules pytest imports only once its ``pythonpath`` option has put the tree *first* on ``sys.path``
  (``pdb``, ``getpass``, ``codeop`` …: ``LATER``): a top-level ``pdb.py`` would run inside every session,
  before the conftest files, in no file a reviewer reads as test code;
* modules this platform does not have (``nt``, ``msvcrt``, ``_winapi``): ``pathlib`` and ``subprocess`` try
  them while pytest is being imported, and the tree, wherever it sits on the path, would supply them before
  the guard. For code outside the tree they stay missing.

An import written in the tree's own code resolves as Python resolves it, so a project's ``secrets.py`` keeps
working for the project.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import BuiltinImporter, FrozenImporter, ModuleSpec, PathFinder

# Standard-library modules pytest 9, pytest-socket and the guard import after the tree may be first on the
# path: what the tamper scan lists as stand-ins (tests/test_stdlib_shadow.py measures it and fails when a
# pytest release imports another one late). The finder itself covers every standard-library name.
LATER = frozenset(
    {"pdb", "bdb", "cmd", "code", "codeop", "getpass", "readline", "rlcompleter", "termios", "pwd"}
    | {"contextvars", "_contextvars", "faulthandler", "tty", "pty"}
    | {"concurrent"}  # the guard watches concurrent.futures' results (red team 29, F1)
)

_STANDARD = getattr(sys, "stdlib_module_names", frozenset())  # Python 3.10+
_HOME = os.path.dirname(os.__file__)
_FOLDERS = [_HOME, os.path.join(_HOME, "lib-dynload")]
_IMPORT_MACHINERY = (os.path.join(_HOME, "importlib") + os.sep, os.path.abspath(__file__))


def standard_spec(name: str) -> ModuleSpec | None:
    """Where the standard library itself has top-level module ``name`` (None: not on this platform)."""
    found = FrozenImporter.find_spec(name) or BuiltinImporter.find_spec(name)
    return found or PathFinder.find_spec(name, _FOLDERS)


def _roots() -> tuple[str, ...]:
    roots: list[str] = []
    for path in os.environ.get("PY_SOURCE_PATH", "").split(os.pathsep):
        if path:
            for form in (os.path.abspath(path), os.path.realpath(path)):
                roots.append(form.rstrip(os.sep) + os.sep)
    return tuple(dict.fromkeys(roots))


class _StandardLibraryFirst:
    """A meta-path finder: standard-library names asked for by code outside the tree come from the standard
    library's folders, or are missing."""

    def __init__(self, roots: tuple[str, ...]) -> None:
        self._roots = roots

    def _in_tree(self, filename: str) -> bool:
        return os.path.abspath(filename).startswith(self._roots)

    def _asked_by_the_tree(self) -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith("<frozen ") and not filename.startswith("<frozen importlib."):
                return False  # a frozen standard-library module (os, runpy, ntpath)
            # The import system's own frames, and code compiled from a string, speak for their caller.
            if not (filename.startswith("<") or filename.startswith(_IMPORT_MACHINERY)):
                return self._in_tree(filename)
            frame = frame.f_back
        return False

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if path is not None or name not in _STANDARD or name in sys.builtin_module_names:
            return None
        if not self._roots or self._asked_by_the_tree():
            return None
        spec = PathFinder.find_spec(name, _FOLDERS)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec

    def invalidate_caches(self) -> None:
        PathFinder.invalidate_caches()


def install() -> None:
    """Put the finder just ahead of the path finder, once per interpreter (the clean launcher runs this module
    again): builtin and frozen modules are still found first."""
    if any(type(f).__name__ == _StandardLibraryFirst.__name__ for f in sys.meta_path):
        return
    at = next((i for i, f in enumerate(sys.meta_path) if f is PathFinder), len(sys.meta_path))
    sys.meta_path.insert(at, _StandardLibraryFirst(_roots()))


def _extend():
    extra = []
    script = sys.argv[0] if sys.argv else ""
    if getattr(sys.flags, "safe_path", False) and script not in ("", "-c", "-m") and os.path.isfile(script):
        extra.append(os.path.dirname(os.path.abspath(script)))
    extra += [p for p in os.environ.get("PY_SOURCE_PATH", "").split(os.pathsep) if p]
    for path in extra:
        if path not in sys.path:
            sys.path.append(path)


if __name__ in ("sitecustomize", "_grader_startup"):  # not when the grader imports it for LATER
    install()
    _extend()
