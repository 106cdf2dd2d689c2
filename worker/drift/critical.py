"""What chance alone reaches: the values of the drift metrics that a window drawn from
the reference's own distribution exceeds with probability ``alpha``.

A window of ``n`` rows against a reference of ``m``: PSI is about (1/n + 1/m) times a
chi-square with one degree of freedom fewer than the bins, Jensen-Shannon (in bits) an
eighth of that over ln 2, and the two-sample Kolmogorov-Smirnov distance sqrt(1/n +
1/m) times its asymptotic critical value (read at bin edges it is no larger, so this
is conservative). Labelled errors are binomial.
"""

from __future__ import annotations

import math

from scipy.stats import binom, chi2


def psi(n: int, m: int, bins: int, alpha: float) -> float:
    return (1 / n + 1 / m) * float(chi2.isf(alpha, max(bins - 1, 1)))


def jensen_shannon(n: int, m: int, bins: int, alpha: float) -> float:
    return psi(n, m, bins, alpha) / (8 * math.log(2))


def kolmogorov_smirnov(n: int, m: int, alpha: float) -> float:
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt(1 / n + 1 / m)


def error_rate(n: int, rate: float, alpha: float) -> float:
    """The share of ``n`` labels wrong that a true error ``rate`` exceeds with
    probability at most ``alpha`` (binomial)."""
    return float(binom.isf(alpha, n, rate)) / n
