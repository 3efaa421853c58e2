"""Adversarial submissions: each builder writes a hostile variant of sample_solution (or a tiny repo).

``CASES`` maps a case name to its builder and the score band the default rubric must give each row it names
(``{"offline-replay": (0, 1)}`` = a score from 0 to 1). Every builder takes a destination folder and returns
the path of a committed git repository. The submissions are built by the shipped calibration corpus's
``tamper`` mutation (grader/selftest/mutations.py), so the tests and `grade --selftest` grade the same ones.
"""

from tests.adversarial.builders import CASES, Case, build

__all__ = ["CASES", "Case", "build"]
