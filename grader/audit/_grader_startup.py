"""The grader's start-up module, copied as ``sitecustomize.py`` into the folder first on ``PYTHONPATH``.

``site`` imports the first ``sitecustomize`` on the path, before any pytest plugin: with this one first, a
``sitecustomize.py`` (or ``usercustomize.py``: ``PYTHONNOUSERSITE`` is set) in the submission never runs.
The submission's tree is not on ``PYTHONPATH`` and the run has ``PYTHONSAFEPATH``, so at start-up nothing
can be imported from it; it joins ``sys.path`` here, *after* the standard library and the venv's packages, so
a ``pytest.py`` or ``pluggy/`` in the checkout cannot stand in for the real ones before the guard loads.
A script run by path (``python tools/x.py``) still finds its siblings: its folder is appended too.

Appending is not enough for two kinds of standard-library name (red team 24, F2), so a finder in front of
every other one answers for them from the standard library alone:

* modules this platform does not have (``nt``, ``msvcrt``, ``_winapi``): ``pathlib`` and ``subprocess`` try
  them while pytest is being imported, and a same-named file anywhere on the path, the tree's included,
  would run then, before the guard. Here they are missing, as the standard library has them.
* modules pytest imports only once its ``pythonpath`` option has put the tree *first* on ``sys.path``
  (``pdb``, ``getpass``, ``codeop`` …: ``LATER``): a top-level ``pdb.py`` would run inside every session,
  before the conftest files, in no file a reviewer reads as test code.

Other standard-library names resolve as usual, so a project's own ``secrets.py`` keeps working as it does
without the grader.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import BuiltinImporter, FrozenImporter, ModuleSpec, PathFinder

# Standard-library modules pytest 9, pytest-socket and the guard import after the tree may be first on the
# path (measured by tests/test_stdlib_shadow.py: it fails when a pytest release adds one).
LATER = frozenset(
    {"pdb", "bdb", "cmd", "code", "codeop", "getpass", "readline", "rlcompleter", "termios", "pwd"}
    | {"contextvars", "_contextvars", "faulthandler", "tty", "pty"}
)


_STANDARD = getattr(sys, "stdlib_module_names", frozenset())  # Python 3.10+
_HOME = os.path.dirname(os.__file__)
_FOLDERS = [_HOME, os.path.join(_HOME, "lib-dynload")]


def standard_spec(name: str) -> ModuleSpec | None:
    """Where the standard library itself has top-level module ``name`` (None: not on this platform)."""
    found = FrozenImporter.find_spec(name) or BuiltinImporter.find_spec(name)
    return found or PathFinder.find_spec(name, _FOLDERS)


class _StandardLibraryFirst:
    """A meta-path finder: ``LATER`` names from the standard library's folders, absent names nowhere."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if path is not None or name not in _STANDARD or name in sys.builtin_module_names:
            return None
        if FrozenImporter.find_spec(name) is not None:
            return None
        spec = PathFinder.find_spec(name, _FOLDERS)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec if name in LATER else None

    def invalidate_caches(self) -> None:
        PathFinder.invalidate_caches()


def install() -> None:
    """Put the finder first once per interpreter (the clean launcher calls this module again)."""
    if not any(type(f).__name__ == _StandardLibraryFirst.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, _StandardLibraryFirst())


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
