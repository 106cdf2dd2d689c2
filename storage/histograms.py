"""Fixed-bin histograms and the distances between them: PSI, Jensen-Shannon, KS.

Pure functions over bin counts; the bins of a numeric series come from its reference
(quantile edges), so a window's counts and the reference's line up bin for bin.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Added to every bin count before taking shares: an empty bin then costs a finite,
# small-sample-sized amount instead of log(0).
_PSEUDO_COUNT = 0.5

# PSI bands as the credit-scoring literature draws them.
PSI_MODERATE = 0.1
PSI_MAJOR = 0.25


def _shares(counts: Sequence[float]) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64) + _PSEUDO_COUNT
    return c / c.sum()


def psi(reference: Sequence[float], current: Sequence[float]) -> float:
    """Population stability index of ``current`` against ``reference`` (same bins)."""
    r, c = _shares(reference), _shares(current)
    return float(np.sum((c - r) * np.log(c / r)))


def jensen_shannon(reference: Sequence[float], current: Sequence[float]) -> float:
    """Jensen-Shannon divergence in bits: 0 (same) to 1 (disjoint)."""
    r, c = _shares(reference), _shares(current)
    m = (r + c) / 2
    return float((np.sum(r * np.log2(r / m)) + np.sum(c * np.log2(c / m))) / 2)


def kolmogorov_smirnov(reference: Sequence[float], current: Sequence[float]) -> float:
    """The largest gap between the two cumulative distributions, read at the bin edges."""
    r = np.cumsum(np.asarray(reference, dtype=np.float64))
    c = np.cumsum(np.asarray(current, dtype=np.float64))
    if r[-1] <= 0 or c[-1] <= 0:
        return 0.0
    return float(np.max(np.abs(r / r[-1] - c / c[-1])))


def psi_level(value: float) -> str:
    """ "none" (< 0.1), "moderate" (0.1-0.25) or "major" (> 0.25)."""
    if value < PSI_MODERATE:
        return "none"
    return "moderate" if value <= PSI_MAJOR else "major"


def quantile_edges(values: Sequence[float] | np.ndarray, bins: int) -> list[float]:
    """Inner edges that split ``values`` into up to ``bins`` equally filled bins."""
    qs = np.quantile(np.asarray(values, dtype=np.float64), np.linspace(0, 1, bins + 1)[1:-1])
    return sorted({float(q) for q in qs})


def bin_numeric(edges: Sequence[float], values: np.ndarray) -> np.ndarray:
    """Bin index per value: 0 below the first edge, ``len(edges)`` at or above the last."""
    return np.searchsorted(np.asarray(edges, dtype=np.float64), values, side="right")


def counts_of(indexes: np.ndarray, bins: int) -> list[int]:
    """Histogram of bin indexes 0..bins-1 (indexes outside are dropped)."""
    inside = indexes[(indexes >= 0) & (indexes < bins)]
    return [int(n) for n in np.bincount(inside.astype(np.int64), minlength=bins)[:bins]]
