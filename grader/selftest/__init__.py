"""The calibration corpus and `grade --selftest`: known submissions with the score band each row must land in.

The corpus is data (corpus.yaml); its cases are copies of sample_solution changed by named mutations
(mutations.py). `run_selftest` grades each with the installed grader and a rubric, so a rubric edit or a
grader change that makes grading lenient or harsh is caught before it grades a candidate.
"""

from __future__ import annotations

from grader.selftest.corpus import Case, default_corpus_path, default_corpus_paths, load_corpus
from grader.selftest.runner import CaseResult, RowVerdict, build_case, run_case, run_selftest

__all__ = [
    "Case",
    "CaseResult",
    "RowVerdict",
    "build_case",
    "default_corpus_path",
    "default_corpus_paths",
    "load_corpus",
    "run_case",
    "run_selftest",
]
