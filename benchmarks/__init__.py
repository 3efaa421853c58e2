"""Benchmarks (`nox -s bench`): replay, secret scan and grading, each against a baseline in the same run."""
