"""What every benchmark shares: a series of timed runs, a target's verdict, a section of the report."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Section", "Series", "Verdict", "ratio", "stopwatch"]


@dataclass
class Series:
    """The values of one measured quantity over repeated runs, in ``unit``."""

    label: str
    unit: str
    values: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def cell(self) -> str:
        """``median (min–max) unit`` with a precision that suits the magnitude."""
        return f"{_fmt(self.median)} ({_fmt(self.low)}–{_fmt(self.high)}) {self.unit}"


@dataclass
class Verdict:
    """One target of the issue: what it asks, what was measured, and whether it holds."""

    target: str
    measured: str
    passed: bool | None  # None: could not be measured in this run (``measured`` says why)

    @property
    def mark(self) -> str:
        return {True: "PASS", False: "MISS", None: "n/a"}[self.passed]


@dataclass
class Section:
    title: str
    method: list[str] = field(default_factory=list)  # how it was measured, one bullet each
    series: list[Series] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # observations from this run (e.g. a vcrpy mismatch)


def ratio(numerator: Series, denominator: Series) -> float:
    """The median of the round-by-round ratios; the ratio of the medians if the series are not paired.

    Value ``i`` of both series was measured in round ``i``, side by side: a burst of load elsewhere on the
    machine then inflates both halves of that round's ratio, where it would move only one median.
    """
    if len(numerator.values) == len(denominator.values):
        return statistics.median(n / d for n, d in zip(numerator.values, denominator.values, strict=True))
    return numerator.median / denominator.median


def stopwatch(func: Callable[[], object]) -> tuple[float, object]:
    """Seconds ``func`` took, and what it returned."""
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"
