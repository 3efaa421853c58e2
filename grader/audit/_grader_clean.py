"""Run pytest in a clean interpreter: ``python -I -B _grader_clean.py ARGS`` (the grader's cross-check).

``-I`` ignores every ``PYTHON*`` variable and keeps the working folder and this script's folder off the
start-up path, so nothing from the submission's tree (``sitecustomize.py``, ``usercustomize.py``, modules
shadowing pytest's) is imported before pytest and the guard plugin. The grader's start-up module, beside this
file, is then run by hand: it appends the tree to ``sys.path`` and keeps the standard library's names to the
standard library (its docstring says which).
"""

import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)  # the guard plugin's folder
_spec = importlib.util.spec_from_file_location("_grader_startup", os.path.join(_HERE, "sitecustomize.py"))
if _spec is None or _spec.loader is None:
    raise SystemExit("the grader's start-up module is missing beside the clean launcher")
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))

import pytest  # noqa: E402 - after the path is set

raise SystemExit(pytest.main(sys.argv[1:]))
