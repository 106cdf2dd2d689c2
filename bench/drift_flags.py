"""``python -m bench.drift_flags [--windows N] [--rows 100,1000,10000] [--seed S]``

How often drift flags are raised wrongly, and how often the demo's shift is caught:
for each demo model (digits, diabetes), the served outputs, input projections and
label errors of its held-out set (the demo's requests) are resampled into a reference
of ``drift.reference_rows`` rows and a window of n rows, each drawn afresh per trial,
then counted by the worker's own window accumulator and judged by its own
``evaluate`` at the default thresholds. Clean windows measure false flags; windows
drawn from the demo's shifted requests (digits inverted, diabetes features x4) against
a clean reference measure detection.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
from rich.console import Console
from rich.table import Table

from consumers.contract import InferenceRequest
from storage.drift_records import CATEGORICAL, NUMERIC, WindowDelta, WindowKey, WindowStats
from worker.demo.models import diabetes_test_set, digits_test_set, ensure_demo_models
from worker.demo.run import DIABETES_SHIFT_SCALE
from worker.demo.workload import diabetes_requests, digits_requests
from worker.drift.accumulate import WindowAccumulator
from worker.drift.evaluate import evaluate
from worker.drift.observe import Observation
from worker.models import ClassifierAdapter, ModelRegistry
from worker.settings import DriftConfig
from worker.settings.drift_thresholds import DriftThresholds

T0 = datetime(2026, 12, 6, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Served:
    """One model's answers to a set of requests, per row, as ``observe`` reads them."""

    model: str
    kind: str
    classes: int
    outputs: np.ndarray  # class labels or numbers
    inputs: np.ndarray  # each request's mean feature
    abs_errors: np.ndarray  # |output - expected|, as the drift log pairs them

    def sample(self, rows: np.ndarray) -> Observation:
        return Observation(
            model=self.model,
            model_version="1",
            rows=len(rows),
            output_kind=self.kind,
            classes=self.classes,
            outputs=self.outputs[rows],
            inputs=self.inputs[rows],
            abs_errors=self.abs_errors[rows].tolist(),
        )


def served(registry: ModelRegistry, requests: list[InferenceRequest]) -> Served:
    model = requests[0].model
    adapter = registry.adapter(model)
    items = [adapter.prepare(r.inputs) for r in requests]
    outputs = registry.get(model).run(items)
    pairs = [adapter.drift(o, r.expected) for o, r in zip(outputs, requests, strict=True)]
    errors = np.asarray([abs(p[0] - p[1]) for p in pairs if p is not None], dtype=np.float64)
    classifier = isinstance(adapter, ClassifierAdapter)
    values = [o["label"] if isinstance(o, dict) else o for o in outputs]
    return Served(
        model,
        CATEGORICAL if classifier else NUMERIC,
        adapter.num_classes if isinstance(adapter, ClassifierAdapter) else 0,
        np.asarray(values, dtype=np.int64 if classifier else np.float64),
        np.asarray([np.mean(item) for item in items], dtype=np.float64),
        errors,
    )


def demo_sets(registry: ModelRegistry) -> dict[str, tuple[Served, Served]]:
    """Per model: its held-out requests, clean and shifted as ``inferlane demo`` sends them."""
    digits, diabetes = len(digits_test_set()[0]), len(diabetes_test_set()[0])
    return {
        "digits": (
            served(registry, digits_requests(digits)),
            served(registry, digits_requests(digits, inverted=True)),
        ),
        "diabetes": (
            served(registry, diabetes_requests(diabetes)),
            served(registry, diabetes_requests(diabetes, scale=DIABETES_SHIFT_SCALE)),
        ),
    }


def window_verdict(
    reference: Served,
    window: Served,
    n: int,
    config: DriftConfig,
    rng: np.random.Generator,
) -> list[str]:
    """The metrics one fresh reference and one window of ``n`` rows cross."""
    acc = WindowAccumulator(
        window_s=config.window_s, reference_rows=config.reference_rows, bins=config.bins
    )
    ref_rows = rng.integers(0, len(reference.outputs), config.reference_rows)
    acc.add(reference.sample(ref_rows), T0)
    later = T0 + timedelta(seconds=config.window_s)
    key = acc.add(window.sample(rng.integers(0, len(window.outputs), n)), later)
    deltas, refs = acc.take()
    stats = _stats(key, deltas[key], config.window_s)
    references = {ref.series: ref for ref in refs}
    verdict = evaluate(stats, references, config.thresholds)
    return [c.metric for c in verdict.crossings]


def _stats(key: WindowKey, d: WindowDelta, window_s: int) -> WindowStats:
    bins: dict[str, dict[int, int]] = {}
    for (series, b), count in d.bins.items():
        bins.setdefault(series, {})[b] = count
    return WindowStats(
        key.model, key.model_version, key.window_start, window_s,
        rows=d.rows, labelled=d.labelled, wrong=d.wrong, abs_error_sum=d.abs_error_sum,
        bins=bins,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Rate:
    model: str
    rows: int
    shifted: bool
    windows: int
    flagged: int
    metrics: Counter[str]

    @property
    def share(self) -> float:
        return self.flagged / self.windows


def measure(
    sets: dict[str, tuple[Served, Served]],
    rows: list[int],
    windows: int,
    *,
    config: DriftConfig | None = None,
    seed: int = 0,
) -> list[Rate]:
    config = config or DriftConfig()
    out = []
    for model, (clean, shifted) in sets.items():
        for n in rows:
            for is_shifted, window in ((False, clean), (True, shifted)):
                rng = np.random.default_rng([seed, n, int(is_shifted)])
                metrics: Counter[str] = Counter()
                flagged = 0
                for _ in range(windows):
                    crossed = window_verdict(clean, window, n, config, rng)
                    flagged += bool(crossed)
                    metrics.update(crossed)
                out.append(Rate(model, n, is_shifted, windows, flagged, metrics))
    return out


def report(rates: list[Rate], console: Console) -> None:
    table = Table(title="drift flags at the default thresholds (windows flagged)")
    for column in ("model", "window rows", "clean: flagged", "by metric", "shifted: flagged"):
        table.add_column(column, justify="right")
    by_key = {(r.model, r.rows, r.shifted): r for r in rates}
    for (model, n, shifted), clean in by_key.items():
        if shifted:
            continue
        shift = by_key[(model, n, True)]
        metrics = ", ".join(f"{m} {k}" for m, k in sorted(clean.metrics.items())) or "-"
        table.add_row(
            model,
            f"{n:,}",
            f"{clean.flagged}/{clean.windows} ({clean.share:.1%})",
            metrics,
            f"{shift.flagged}/{shift.windows} ({shift.share:.1%})",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drift_flags", description=__doc__)
    parser.add_argument("--windows", type=int, default=1000, help="per model and size")
    parser.add_argument("--rows", default="100,1000,10000", help="window sizes, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    console = Console()
    t = DriftThresholds()
    config = DriftConfig()
    console.print(
        f"reference {config.reference_rows} rows, {config.bins} bins; thresholds: psi "
        f"{t.psi_max}, js {t.js_max}, ks {t.ks_max}, error rate {t.error_rate_max}, "
        f"alpha {t.alpha}; min_rows {t.min_rows}, min_labelled {t.min_labelled}"
    )
    sets = demo_sets(ModelRegistry.from_toml(ensure_demo_models()))
    rows = [int(v) for v in args.rows.split(",")]
    report(measure(sets, rows, args.windows, config=config, seed=args.seed), console)


if __name__ == "__main__":
    main()
