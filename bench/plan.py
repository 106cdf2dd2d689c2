"""How big each scenario is in each mode: smoke (CI, seconds), quick (< 3 min), full."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plan:
    mode: str
    models: tuple[str, ...]
    ceiling_batches: dict[str, tuple[int, ...]]
    ceiling_min_s: float  # timed forward passes per batch size, at least this long
    backlog: dict[str, int]  # requests pre-published per throughput run, per model
    run_s: float  # a throughput run stops this long after its first result
    priority_low: int  # saturating `low` backlog (digits)
    priority_rate_hz: float  # sparse `high` requests
    priority_s: float
    priority_warm_s: float  # the backlog runs unmeasured first (the batch cap climbs)
    # The high requests come in this many bursts (priority_s in all); the low lane runs
    # alone for priority_solo_s before the first, between each two and after the last.
    priority_bursts: int
    priority_solo_s: float
    low_load_rate_hz: dict[str, float]
    low_load_s: float
    soak_requests: int
    overhead_pairs: int  # off/on pairs per feature in an overhead scenario (--only ops,drift)
    high_cost_pairs: int  # windows without, then with high requests (--only high_cost)
    high_cost_window_s: float
    high_cost_rate_hz: float
    step_pairs: int  # adaptive/fixed pairs per fixed size in the step load (--only step_load)
    # Sparse priority: lone high requests 100-500 ms apart in ``sparse_windows`` windows
    # of ``sparse_window_s`` under a backlog (after ``sparse_warm_s`` unmeasured), the
    # backlog alone for ``sparse_solo_s`` around each; the same requests on the idle worker.
    sparse_warm_s: float
    sparse_windows: int
    sparse_window_s: float
    sparse_solo_s: float
    systems: tuple[str, ...] = ("naive", "threadpool", "inferlane")
    # Scenarios run when ``--only`` is not given.
    default_scenarios: tuple[str, ...] = (
        "ceiling",
        "naive",
        "threadpool",
        "inferlane",
        "priority",
        "sparse_priority",
        "low_load",
        "soak",
    )
    timeout_s: float = 120.0  # no scenario waits longer than this for its results


SMOKE = Plan(
    mode="smoke",
    models=("digits",),
    ceiling_batches={"digits": (1, 64)},
    ceiling_min_s=0.05,
    backlog={"digits": 300},
    run_s=1.0,
    priority_low=2000,
    priority_rate_hz=10,
    priority_s=1.0,
    priority_warm_s=1.0,
    priority_bursts=1,
    priority_solo_s=0.5,
    low_load_rate_hz={"digits": 10},
    low_load_s=1.0,
    soak_requests=1000,
    overhead_pairs=1,
    high_cost_pairs=1,
    high_cost_window_s=1.0,
    high_cost_rate_hz=100,
    step_pairs=1,
    sparse_warm_s=1.0,
    sparse_windows=1,
    sparse_window_s=2.0,
    sparse_solo_s=1.0,
    timeout_s=60.0,
    # Seconds, for CI: one of each kind of Kafka system (each start costs ~6 s).
    default_scenarios=("ceiling", "naive", "threadpool", "inferlane"),
)

QUICK = Plan(
    mode="quick",
    models=("digits", "minilm"),
    ceiling_batches={"digits": (1, 16, 64, 256, 1024), "minilm": (1, 8, 32, 64)},
    ceiling_min_s=0.4,
    # inferlane delivers results in chunks (up to 1024 by default): a run must span several.
    backlog={"digits": 25_000, "minilm": 512},
    run_s=5.0,
    priority_low=25_000,
    priority_rate_hz=20,
    priority_s=3.0,
    priority_warm_s=5.0,
    priority_bursts=1,
    priority_solo_s=1.5,
    low_load_rate_hz={"digits": 20, "minilm": 5},
    low_load_s=3.0,
    soak_requests=12_000,
    overhead_pairs=3,
    high_cost_pairs=2,
    high_cost_window_s=3.0,
    high_cost_rate_hz=100,
    step_pairs=1,
    sparse_warm_s=5.0,
    sparse_windows=2,
    sparse_window_s=6.0,
    sparse_solo_s=3.0,
    timeout_s=60.0,
)

FULL = Plan(
    mode="full",
    models=("digits", "minilm"),
    ceiling_batches={
        "digits": (1, 8, 32, 64, 128, 256, 512, 1024),
        "minilm": (1, 4, 8, 16, 32, 64),
    },
    ceiling_min_s=2.0,
    backlog={"digits": 150_000, "minilm": 4000},
    run_s=20.0,
    priority_low=200_000,
    priority_rate_hz=20,
    priority_s=20.0,
    priority_warm_s=20.0,
    priority_bursts=4,
    priority_solo_s=5.0,
    low_load_rate_hz={"digits": 20, "minilm": 5},
    low_load_s=20.0,
    soak_requests=200_000,
    overhead_pairs=5,
    high_cost_pairs=4,
    high_cost_window_s=5.0,
    high_cost_rate_hz=100,
    step_pairs=3,
    sparse_warm_s=10.0,
    sparse_windows=3,
    sparse_window_s=10.0,
    sparse_solo_s=4.0,
    timeout_s=600.0,
)

PLANS = {p.mode: p for p in (SMOKE, QUICK, FULL)}
