"""Run pytest in a clean interpreter: ``python -I -B _grader_clean.py ARGS`` (the grader's cross-check).

``-I`` ignores every ``PYTHON*`` variable and keeps the working folder and this script's folder off the
start-up path, so nothing from the submission's tree (``sitecustomize.py``, ``usercustomize.py``, modules
shadowing pytest's) is imported before pytest and the guard plugin; the tree joins ``sys.path`` at the end.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the guard plugin's folder
for _path in os.environ.get("PY_SOURCE_PATH", "").split(os.pathsep):
    if _path and _path not in sys.path:
        sys.path.append(_path)

import pytest  # noqa: E402 - after the path is set

raise SystemExit(pytest.main(sys.argv[1:]))
