"""Adversarial submissions: each builder writes a hostile variant of sample_solution (or a tiny repo).

``CASES`` maps a case name to its builder and the score band the default rubric must give each row it names
(``{"offline-replay": (0, 1)}`` = a score from 0 to 1). The calibration corpus (`grade --selftest`) can reuse
them: every builder takes a destination folder and returns the path of a committed git repository.
"""

from tests.adversarial.builders import CASES, Case, build

__all__ = ["CASES", "Case", "build"]
