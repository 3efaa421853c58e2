"""The cassette take-home grader: acquire a submission, replay it offline in a sandbox, score a rubric."""

__version__ = "0.1.0"

__all__ = ["__version__"]
