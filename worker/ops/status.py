"""The status page's data: lanes, models, errors, drift, rollouts and other series.

Rates and percentiles are over the window since an earlier read (at least
``window_s`` old when one exists), so the page shows now, not the average since start.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from worker.ops.metrics import ErrorNote
from worker.ops.readiness import Readiness
from worker.ops.registry_read import Snapshot, minus, quantile

LATENCY = "inferlane_request_latency_seconds"
RESULTS = "inferlane_results_total"
BATCH = "inferlane_batch_size_requests"
BUSY = "inferlane_compute_busy_seconds_total"
# Families shown in their own sections; every other inferlane_ one is listed as "other".
_SHOWN = (
    "inferlane_request_latency_seconds", "inferlane_queue_latency_seconds",
    "inferlane_compute_latency_seconds", "inferlane_publish_latency_seconds",
    "inferlane_results", "inferlane_batch_size_requests", "inferlane_compute_busy_seconds",
    "inferlane_lane_depth_requests", "inferlane_batch_cap_requests", "inferlane_process",
    "inferlane_records_consumed", "inferlane_batches", "inferlane_ready",
    "inferlane_consumer_lag_records", "inferlane_dead_letters", "inferlane_queued_requests",
    "inferlane_in_flight_requests", "inferlane_in_flight_bytes", "inferlane_paused_partitions",
    "inferlane_assigned_partitions",
)  # fmt: skip
_MAX_OTHER = 60
_LANE_RANK = {"high": 0, "normal": 1, "low": 2}


@dataclass(frozen=True, slots=True)
class _Read:
    at_s: float
    snapshot: Snapshot


class StatusBoard:
    def __init__(self, *, window_s: float = 5.0) -> None:
        self._window_s = window_s
        self._reads: list[_Read] = []
        self._started_s = time.monotonic()

    def build(
        self, snapshot: Snapshot, readiness: Readiness, errors: Sequence[ErrorNote]
    ) -> dict[str, Any]:
        """Blocking-free but not free: call it in a thread. Not thread-safe: one caller."""
        now = time.monotonic()
        before = self._baseline(now)
        self._reads.append(_Read(now, snapshot))
        elapsed = now - before.at_s if before else now - self._started_s
        base = before.snapshot if before else Snapshot([], {})
        return {
            "uptime_s": round(now - self._started_s, 1),
            "window_s": round(elapsed, 2),
            "readiness": readiness.body(),
            "lanes": _lanes(snapshot, base, elapsed),
            "models": _models(snapshot, base, elapsed),
            "lag": _lag(snapshot),
            "pipeline": _pipeline(snapshot),
            "process": {
                s.name.removeprefix("inferlane_"): s.value
                for s in snapshot.samples
                if s.name.startswith("inferlane_process_") or s.name.startswith("inferlane_gpu_")
            },
            "drift": _family_rows(snapshot, lambda n: n.startswith("inferlane_drift")),
            "rollouts": _rollouts(snapshot),
            "other": _family_rows(
                snapshot,
                lambda n: (
                    n.startswith("inferlane_")
                    and not n.startswith(("inferlane_drift", "inferlane_rollout"))
                    and not n.startswith(_SHOWN)
                    and not n.startswith("inferlane_gpu_")
                ),
            )[:_MAX_OTHER],
            "errors": [
                {
                    "at_s": e.at_s,
                    "request_id": e.request_id,
                    "model": e.model,
                    "code": e.code,
                    "status": e.status,
                }
                for e in reversed(errors)
            ],
        }

    def _baseline(self, now: float) -> _Read | None:
        """The newest read at least ``window_s`` old; older ones are dropped."""
        old = [r for r in self._reads if now - r.at_s >= self._window_s]
        if old:
            self._reads = [r for r in self._reads if r.at_s >= old[-1].at_s]
            return old[-1]
        return self._reads[0] if self._reads else None


def _rate(now: float, before: float, elapsed: float) -> float:
    return max(0.0, now - before) / elapsed if elapsed > 0 else 0.0


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _lanes(now: Snapshot, before: Snapshot, elapsed: float) -> dict[str, dict[str, Any]]:
    depth = now.total("inferlane_lane_depth_requests", "lane")
    done, done_before = now.total(RESULTS, "lane"), before.total(RESULTS, "lane")
    buckets, buckets_before = now.buckets(LATENCY, "lane"), before.buckets(LATENCY, "lane")
    out = {}
    for lane in sorted(set(depth) | set(done), key=lambda name: _LANE_RANK.get(name, 9)):
        window = minus(buckets.get(lane, {}), buckets_before.get(lane, {}))
        out[lane] = {
            "depth": int(depth.get(lane, 0)),
            "results_total": int(done.get(lane, 0)),
            "rate_per_s": round(_rate(done.get(lane, 0), done_before.get(lane, 0), elapsed), 1),
            "p50_ms": _ms(quantile(0.5, window)),
            "p99_ms": _ms(quantile(0.99, window)),
        }
    return out


def _models(now: Snapshot, before: Snapshot, elapsed: float) -> dict[str, dict[str, Any]]:
    cap = now.total("inferlane_batch_cap_requests", "model")
    done, done_before = now.total(RESULTS, "model"), before.total(RESULTS, "model")
    sizes, sizes_before = now.total(f"{BATCH}_sum", "model"), before.total(f"{BATCH}_sum", "model")
    count, count_before = (
        now.total(f"{BATCH}_count", "model"),
        before.total(f"{BATCH}_count", "model"),
    )
    busy, busy_before = now.total(BUSY, "model"), before.total(BUSY, "model")
    out = {}
    for model in sorted(set(cap) | set(done)):
        batches = count.get(model, 0) - count_before.get(model, 0)
        items = sizes.get(model, 0) - sizes_before.get(model, 0)
        out[model] = {
            "batch_cap": int(cap.get(model, 0)),
            "mean_batch": round(items / batches, 1) if batches > 0 else None,
            "rate_per_s": round(_rate(done.get(model, 0), done_before.get(model, 0), elapsed), 1),
            "utilization": round(_rate(busy.get(model, 0), busy_before.get(model, 0), elapsed), 3),
            "results_total": int(done.get(model, 0)),
        }
    return out


def _lag(now: Snapshot) -> list[dict[str, Any]]:
    rows = [
        {"topic": s.labels["topic"], "partition": s.labels["partition"], "records": int(s.value)}
        for s in now.named("inferlane_consumer_lag_records")
    ]
    return sorted(rows, key=lambda r: (r["topic"], int(r["partition"])))


def _pipeline(now: Snapshot) -> dict[str, float]:
    """Whole-worker gauges and dead letters by reason."""
    out = {
        name.removeprefix("inferlane_"): sum(s.value for s in now.named(name))
        for name in (
            "inferlane_queued_requests", "inferlane_in_flight_requests",
            "inferlane_in_flight_bytes", "inferlane_paused_partitions",
            "inferlane_assigned_partitions",
        )
    }  # fmt: skip
    for reason, n in sorted(now.total("inferlane_dead_letters_total", "reason").items()):
        out[f"dead letters: {reason}"] = n
    return out


def _rollouts(now: Snapshot) -> list[dict[str, Any]]:
    """Each model's newest rollout: mode, state, candidate share and the last gates."""
    states = {
        (s.labels["model"], s.labels["candidate"]): s.labels["state"]
        for s in now.named("inferlane_rollout_state")
        if s.value == 1
    }
    gates: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for name, field in (("value", "inferlane_rollout_gate_value"),
                        ("threshold", "inferlane_rollout_gate_threshold")):  # fmt: skip
        for s in now.named(field):
            key = (s.labels["model"], s.labels["candidate"])
            gates.setdefault(key, {}).setdefault(s.labels["gate"], {})[name] = s.value
    rows = []
    for s in now.named("inferlane_rollout_share"):
        key = (s.labels["model"], s.labels["candidate"])
        rows.append(
            {
                "model": key[0],
                "candidate": key[1],
                "mode": s.labels["mode"],
                "state": states.get(key),
                "share": s.value,
                "gates": gates.get(key, {}),
            }
        )
    return sorted(rows, key=lambda r: (r["model"], r["candidate"]))


def _family_rows(now: Snapshot, wanted: Any) -> list[dict[str, Any]]:
    return [
        {"name": s.name, "labels": dict(s.labels), "value": s.value}
        for s in now.samples
        if wanted(s.name) and not s.name.endswith(("_created", "_bucket"))
    ]
