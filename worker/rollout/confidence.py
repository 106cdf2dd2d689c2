"""Confidence sequences for means of values in [0, 1]: intervals valid at every look.

A confidence sequence holds the true mean at every sample size at once with probability
at least ``1 - alpha``, so a gate may look after every new count, as often as it likes,
without its error growing with the looks. This one is Robbins' beta-binomial mixture:
for a candidate mean ``p``, the likelihood ratio of the counts under ``q`` against
``p``, averaged over ``q ~ Beta(1/2, 1/2)``, is a nonnegative supermartingale while the
mean is ``p``; Ville's inequality bounds the chance it ever reaches ``1 / alpha``, and
the sequence is every ``p`` for which it has not. Convexity makes the same ratio a
supermartingale for any values in [0, 1] with mean ``p``, not only 0/1 ones, so it
also bounds a mean distance.

Only sums and counts enter: the counts of many workers and intervals add up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.special import betaln

# Beta(1/2, 1/2), Jeffreys' prior: weight where small shares live, and symmetric.
_A = _B = 0.5
_EDGE = 1e-12  # closer to 0 or 1 than this, a bound is 0 or 1


@dataclass(frozen=True, slots=True)
class Bounds:
    low: float
    high: float


def mean_bounds(total: float, n: int, alpha: float) -> Bounds:
    """The interval, at ``n`` values in [0, 1] summing to ``total``, of a confidence
    sequence for their mean at level ``1 - alpha``. [0, 1] without values."""
    if n <= 0:
        return Bounds(0.0, 1.0)
    x = min(max(total, 0.0), float(n))
    y = n - x
    # log of the mixture's likelihood ratio against mean p, minus log(1 / alpha): this
    # constant minus the log-likelihood of p. Convex in p, least (at most -log(1 /
    # alpha)) at the estimate x / n, so each side crosses zero once, or never.
    offset = float(betaln(_A + x, _B + y) - betaln(_A, _B)) - math.log(1.0 / alpha)
    low = _crossing(offset, x, y, going_up=False) if x > 0 else 0.0
    high = _crossing(offset, x, y, going_up=True) if y > 0 else 1.0
    return Bounds(low, high)


def difference_bounds(total_a: float, n_a: int, total_b: float, n_b: int, alpha: float) -> Bounds:
    """A confidence sequence for mean a minus mean b: each mean's at ``alpha / 2``,
    so both hold at every look together with probability at least ``1 - alpha``."""
    a = mean_bounds(total_a, n_a, alpha / 2)
    b = mean_bounds(total_b, n_b, alpha / 2)
    return Bounds(a.low - b.high, a.high - b.low)


def _crossing(offset: float, x: float, y: float, *, going_up: bool) -> float:
    """Where ``offset - x log p - y log(1 - p)`` reaches zero above the estimate
    (``going_up``) or below it. Newton's method from the outer side: on a convex curve
    it never overshoots, so the bound it returns is never inside the sequence."""

    def f(p: float) -> float:
        return offset - (x * math.log(p) if x else 0.0) - (y * math.log1p(-p) if y else 0.0)

    n = x + y
    estimate = x / n
    # First guess: where (p - estimate)^2 = 2 p L / n, the Poisson approximation of
    # n KL(estimate, p) = L, with L = -f(estimate).
    spread = -f(estimate) / n
    root = math.sqrt(2.0 * estimate * spread + spread * spread)
    if going_up:
        p = min(estimate + spread + root, (1.0 + estimate) / 2.0)
    else:
        p = max(estimate + spread - root, estimate / 2.0)
    # Out until outside the sequence: twice as far from the estimate each time, but at
    # most halfway to the edge, which the bound may be.
    while not f(p) > 0.0:
        if going_up:
            p = min(2.0 * p - estimate, (1.0 + p) / 2.0)
            if 1.0 - p < _EDGE:
                return 1.0
        else:
            p = max(2.0 * p - estimate, p / 2.0)
            if p < _EDGE:
                return 0.0
    for _ in range(60):
        value = f(p)
        if value <= 1e-9:
            break
        p -= value / (y / (1.0 - p) - x / p)
    return p
