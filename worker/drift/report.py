"""``inferlane report``: one row of plots per model version, and a text summary.

Columns: labelled error per window with its threshold; PSI of output and input per
window, with the PSI threshold and flagged windows shaded; the output distribution of
the last window against the reference; median latency per lane per window.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt
import numpy as np
from sqlalchemy import Engine

from storage.drift_records import CATEGORICAL, INPUT, OUTPUT
from storage.latency import LatencySample, lane_latencies
from worker.drift.evaluate import Verdict
from worker.drift.views import Window, references_of, verdicts
from worker.settings.drift_thresholds import DriftThresholds


def write_report(
    engine: Engine,
    out: Path,
    *,
    model: str | None,
    since: datetime | None,
    default: DriftThresholds,
    per_model: dict[str, DriftThresholds],
) -> list[str]:
    """Write the PNG to ``out``; return the summary lines."""
    found = verdicts(
        engine, model=model, since=since, window=Window(), default=default, per_model=per_model
    )
    groups: dict[tuple[str, str], list[Verdict]] = {}
    for v in found:
        groups.setdefault((v.window.model, v.window.model_version), []).append(v)
    rows = max(1, len(groups))
    fig, axes = plt.subplots(rows, 4, figsize=(21, 3.6 * rows), squeeze=False)
    lines = []
    for row, ((m, version), vs) in enumerate(sorted(groups.items())):
        t = per_model.get(m, default)
        _plot_group(engine, axes[row][:3], m, version, vs, t)
        _plot_latency(axes[row][3], lane_latencies(engine, m, since=since), vs)
        flagged = [v for v in vs if v.flagged]
        first = flagged[0].window.start.isoformat(timespec="seconds") if flagged else "none"
        lines.append(
            f"{m} {version}: {len(vs)} windows, {sum(v.window.rows for v in vs)} rows, "
            f"{len(flagged)} flagged (first: {first})"
        )
    if not groups:
        axes[0][0].set_title("no drift windows stored")
        lines.append("no drift windows stored")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return lines


def _plot_group(
    engine: Engine,
    axes: list[Any],
    model: str,
    version: str,
    vs: list[Verdict],
    t: DriftThresholds,
) -> None:
    refs = references_of(engine, model, version)
    categorical = OUTPUT in refs and refs[OUTPUT].kind == CATEGORICAL
    x = [v.window.start for v in vs]
    error_ax, psi_ax, dist_ax = axes
    if categorical:
        error_ax.plot(x, [v.window.error_rate for v in vs], marker="o", label="error rate")
        limit = t.error_rate_max
    else:
        error_ax.plot(x, [v.window.mean_abs_error for v in vs], marker="o", label="MAE")
        limit = t.mae_max
    if limit is not None:
        error_ax.axhline(limit, color="red", linestyle="--", label="threshold")
    labelled = any(v.window.labelled for v in vs)
    if not labelled:
        error_ax.set_xticks([])
    error_ax.set_title(f"{model} {version}: labelled error per window" + ("" if labelled else
                       " (no labels)"))  # fmt: skip
    for series in (OUTPUT, INPUT):
        values = [v.metrics.get(f"{series}_psi") for v in vs]
        if any(val is not None for val in values):
            psi_ax.plot(x, [float("nan") if v is None else v for v in values], marker="o",
                        label=f"{series} PSI")  # fmt: skip
    if not refs:
        psi_ax.set_title("no reference: outputs and inputs not tracked")
        dist_ax.set_title("no output reference")
        return
    psi_ax.axhline(t.psi_max, color="red", linestyle="--", label="PSI threshold")
    for v in vs:
        if v.flagged:
            psi_ax.axvspan(v.window.start, v.window.end, color="red", alpha=0.15)
    psi_ax.set_title("drift per window (flagged shaded)")
    for ax in (error_ax, psi_ax):
        ax.legend(fontsize=7)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    ref = refs.get(OUTPUT)
    if ref is None or not vs:
        dist_ax.set_title("no output reference")
        return
    last = vs[-1].window.counts(OUTPUT, len(ref.counts))
    bins = range(len(ref.counts))
    ref_total, last_total = max(1, sum(ref.counts)), max(1, sum(last))
    dist_ax.bar([b - 0.2 for b in bins], [c / ref_total for c in ref.counts], 0.4,
                label="reference")  # fmt: skip
    dist_ax.bar([b + 0.2 for b in bins], [c / last_total for c in last], 0.4, label="last window")
    dist_ax.set_title("output distribution" + (" (class)" if categorical else " (quantile bin)"))
    dist_ax.legend(fontsize=7)


def _plot_latency(ax: Any, samples: list[LatencySample], vs: list[Verdict]) -> None:
    """Median receipt-to-result latency per lane in each window."""
    ax.set_title("median latency per lane (ms)")
    plotted = False
    for lane in ("high", "normal", "low"):
        points = []
        for v in vs:
            w = v.window
            ms = [s.total_ms for s in samples if s.lane == lane and w.start <= s.at < w.end]
            if ms:
                points.append((w.start, float(np.median(ms))))
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=lane)
            plotted = True
    if plotted:
        ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
