"""Rates with their uncertainty: the Wilson score interval, and how a rate is printed in a drift report.

Why Wilson and not `p ± z·sqrt(p(1-p)/n)`: the drift report's rates are usually 0 or close to it over a
few dozen tickets, where the normal approximation gives a zero-width interval at 0 (it claims certainty it
does not have) and bounds below 0. Wilson's interval stays inside [0, 1] and is honest at the edges:
0 changes out of 12 is `[0%, 24%]`, not `[0%, 0%]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Z_95", "Rate", "percent", "wilson"]

# The two-sided 95% normal quantile.
Z_95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` out of ``n`` (both bounds in [0, 1]).

    ``n == 0`` says nothing: the interval is the whole of [0, 1].
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # Clamp the rounding at the edges: 0 of n has a lower bound of exactly 0, n of n an upper bound of 1.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def percent(value: float) -> str:
    """A fraction as a percentage for people: whole percents, one decimal below 10% when it matters."""
    scaled = value * 100
    if scaled != 0 and abs(scaled) < 10 and round(scaled, 1) != round(scaled):
        return f"{scaled:.1f}%"
    return f"{scaled:.0f}%"


@dataclass(frozen=True)
class Rate:
    """``count`` of ``n`` with its Wilson interval; ``str()`` is the report's `4% (n=50) [1%, 14%]`."""

    count: int
    n: int

    @property
    def value(self) -> float:
        return self.count / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.count, self.n)

    def as_dict(self) -> dict[str, object]:
        low, high = self.interval
        return {
            "count": self.count,
            "n": self.n,
            "rate": round(self.value, 6),
            "interval": [round(low, 6), round(high, 6)],
        }

    def __str__(self) -> str:
        low, high = self.interval
        return f"{percent(self.value)} (n={self.n}) [{percent(low)}, {percent(high)}]"
