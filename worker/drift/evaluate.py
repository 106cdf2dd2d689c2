"""The drift decider: a window's numbers against its references and thresholds.

Pure: the worker calls it on closed windows to flag them, the CLI on stored ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from storage.drift_records import CATEGORICAL, OUTPUT, Reference, WindowStats
from storage.histograms import jensen_shannon, kolmogorov_smirnov, psi, psi_level
from worker.drift import critical
from worker.settings.drift_thresholds import DriftThresholds


@dataclass(frozen=True, slots=True)
class Crossing:
    metric: str
    value: float
    threshold: float


@dataclass(slots=True)
class Verdict:
    """A window's metrics (None: not enough data or no reference) and its crossings."""

    window: WindowStats
    metrics: dict[str, float | None] = field(default_factory=dict)
    crossings: list[Crossing] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return bool(self.crossings)

    @property
    def psi_level(self) -> str | None:
        value = self.metrics.get("output_psi")
        return None if value is None else psi_level(value)


def evaluate(
    window: WindowStats, references: Mapping[str, Reference], t: DriftThresholds
) -> Verdict:
    """``references`` maps a series ("output", "input") to its reference histogram.

    A metric crosses when it is above its threshold and above what chance alone reaches
    in a window of this size (``critical``): the window's tests share ``t.alpha``, so an
    in-distribution window is flagged with probability at most about ``t.alpha``."""
    verdict = Verdict(window)
    output = references.get(OUTPUT)
    categorical = output is not None and output.kind == CATEGORICAL
    labelled = window.labelled >= t.min_labelled
    verdict.metrics["error_rate"] = window.error_rate
    verdict.metrics["mae"] = window.mean_abs_error
    judged: dict[str, tuple[Reference, list[int]]] = {}
    for series, ref in sorted(references.items()):
        current = window.counts(series, len(ref.counts))
        if window.rows >= t.min_rows and sum(current) > 0:
            judged[series] = (ref, current)
    error_test = labelled and categorical and t.error_rate_max is not None
    alpha = t.alpha / max(2 * len(judged) + error_test, 1)
    if error_test and t.error_rate_max is not None:
        chance = critical.error_rate(window.labelled, t.error_rate_max, alpha)
        _check(verdict, "error_rate", window.error_rate, max(t.error_rate_max, chance))
    if labelled and not categorical and t.mae_max is not None:
        _check(verdict, "mae", window.mean_abs_error, t.mae_max)
    if window.ref_checked:
        # Any sampled request further from the reference than its tolerance.
        share = window.ref_deviant / window.ref_checked
        _check(verdict, "reference_deviant", share, 0.0)
    for series, (ref, current) in judged.items():
        n, m, bins = sum(current), ref.rows, len(ref.counts)
        chance = critical.psi(n, m, bins, alpha)
        _check(verdict, f"{series}_psi", psi(ref.counts, current), max(t.psi_max, chance))
        if ref.kind == CATEGORICAL:
            chance = critical.jensen_shannon(n, m, bins, alpha)
            value = jensen_shannon(ref.counts, current)
            _check(verdict, f"{series}_js", value, max(t.js_max, chance))
        else:
            chance = critical.kolmogorov_smirnov(n, m, alpha)
            value = kolmogorov_smirnov(ref.counts, current)
            _check(verdict, f"{series}_ks", value, max(t.ks_max, chance))
    return verdict


def _check(verdict: Verdict, metric: str, value: float | None, threshold: float) -> None:
    verdict.metrics[metric] = value
    if value is not None and value > threshold:
        verdict.crossings.append(Crossing(metric, value, threshold))
