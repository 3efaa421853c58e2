"""The grader's start-up module, copied as ``sitecustomize.py`` into the folder first on ``PYTHONPATH``.

``site`` imports the first ``sitecustomize`` on the path, before any pytest plugin: with this one first, a
``sitecustomize.py`` (or ``usercustomize.py``: ``PYTHONNOUSERSITE`` is set) in the submission never runs.
The submission's tree is not on ``PYTHONPATH`` and the run has ``PYTHONSAFEPATH``, so at start-up nothing
can be imported from it; it joins ``sys.path`` here, *after* the standard library and the venv's packages, so
a ``pytest.py`` or ``pluggy/`` in the checkout cannot stand in for the real ones before the guard loads.
A script run by path (``python tools/x.py``) still finds its siblings: its folder is appended too.
"""

import os
import sys


def _extend():
    extra = []
    script = sys.argv[0] if sys.argv else ""
    if getattr(sys.flags, "safe_path", False) and script not in ("", "-c", "-m") and os.path.isfile(script):
        extra.append(os.path.dirname(os.path.abspath(script)))
    extra += [p for p in os.environ.get("PY_SOURCE_PATH", "").split(os.pathsep) if p]
    for path in extra:
        if path not in sys.path:
            sys.path.append(path)


_extend()
del _extend
