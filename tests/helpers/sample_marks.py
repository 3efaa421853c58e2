"""What the bundled sample_solution earns, rubric by rubric (docs/rubric.md, "Provenance").

Its tapes were recorded against the kit's stand-in on purpose. Under rubric/rehearsal.yaml every row is at
the top of the scale. Under the default rubric every row is too, except model-metadata: a recording that no
real model answered stops at 2 there, and the evidence says so. Tests that grade the sample (or a copy of it)
with the default rubric compare against these, never against a hard-coded total.
"""

from __future__ import annotations

from pathlib import Path

from grader.rubric import load_rubric

__all__ = ["LOOPBACK_EVIDENCE", "REHEARSAL", "STANDIN_CAPPED_ROW", "default_scores", "default_total"]

REHEARSAL = Path(__file__).resolve().parents[2] / "rubric" / "rehearsal.yaml"
STANDIN_CAPPED_ROW = "model-metadata"
# The start of that row's evidence for the sample: every one of its tapes came from the stand-in.
LOOPBACK_EVIDENCE = "tapes were recorded against a loopback endpoint (127.0.0.1: a local stand-in"


def default_scores() -> dict[str, int]:
    """Row id -> the sample's score under the default rubric."""
    rubric = load_rubric()
    return {row.id: rubric.max - 1 if row.id == STANDIN_CAPPED_ROW else rubric.max for row in rubric.rows}


def default_total() -> tuple[float, float]:
    """(points, max) of the sample under the default rubric, from the rubric's own weights."""
    rubric = load_rubric()
    scores = default_scores()
    return (
        sum(scores[row.id] * row.weight for row in rubric.rows),
        sum(rubric.max * row.weight for row in rubric.rows),
    )
