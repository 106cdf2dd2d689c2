"""The benchmark harness runs end to end in its smallest configuration.

Never asserts timings: benchmarks are not timed tests. It checks that the run writes
its JSON with the expected shape, a PNG and a summary, and that the ratios are
positive numbers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(170)

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = ("naive", "threadpool", "inferlane")


def _bench_smoke(out: Path, *args: str) -> dict:
    """``python -m bench --smoke`` with ``args``, writing to ``out``: its results.json."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=160,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("bench")
    return _bench_smoke(out), out


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_writes_json_png_and_summary(smoke: tuple[dict, Path]) -> None:
    doc, out = smoke
    assert set(doc) == {"meta", "scenarios", "ratios", "targets"}
    assert (out / "results.png").stat().st_size > 0
    assert "| ratio | value |" in (out / "summary.md").read_text()
    assert doc["meta"]["mode"] == "smoke"
    assert doc["meta"]["torch_threads"] >= 1
    assert 0.0 <= doc["meta"]["cpu_steal_share"] < 1.0  # read from the machine's CPU times


def test_every_scenario_reports_throughput_latency_and_rss(smoke: tuple[dict, Path]) -> None:
    scenarios = smoke[0]["scenarios"]
    assert set(scenarios) == {"ceiling", "throughput", "priority", "low_load", "soak"}
    ceiling = scenarios["ceiling"]["digits"]
    assert {"throughput_rps", "p50_ms", "p99_ms", "peak_rss_mb", "by_batch"} <= set(ceiling)
    one = ceiling["by_batch"]["1"]  # also timed after the low load's gap between requests
    assert one["idle_gap_s"] == pytest.approx(0.1)  # smoke's trickle: 10 digits/s
    assert _positive(one["after_idle_p50_ms"])
    for system in SYSTEMS:
        m = scenarios["throughput"]["digits"][system]
        assert {"throughput_rps", "p50_ms", "p99_ms", "peak_rss_mb", "latency_basis"} <= set(m)
        assert m["results"] > 0
        assert _positive(m["peak_rss_mb"])


def test_ratios_are_positive_numbers(smoke: tuple[dict, Path]) -> None:
    ratios = smoke[0]["ratios"]["digits"]
    for key in (
        "inferlane_over_ceiling",
        "inferlane_over_ceiling_beside",
        "inferlane_over_naive",
        "inferlane_over_threadpool",
    ):
        assert _positive(ratios[key]), (key, ratios[key])


def test_priority_sets_each_burst_beside_the_windows_around_it(tmp_path: Path) -> None:
    # Not among smoke's default scenarios: a run of its own, after inferlane's throughput
    # (its rate sizes the backlog so that it outlasts the bursts).
    doc = _bench_smoke(tmp_path, "--only", "inferlane,priority")
    extra = doc["scenarios"]["priority"]["digits"]["inferlane-lanes"]["extra"]
    bursts = extra["low_rps_bursts"]
    assert len(bursts) == len(extra["low_over_solo_bursts"]) >= 1
    assert len(extra["low_rps_alone"]) == len(bursts) + 1
    assert all(_positive(r) for r in (*bursts, *extra["low_rps_alone"]))
    assert doc["ratios"]["priority"]["digits_low_over_solo"] == extra["low_over_solo"]
    assert _positive(extra["low_over_solo"])


def test_targets_name_value_and_verdict(smoke: tuple[dict, Path]) -> None:
    targets = smoke[0]["targets"]
    assert "digits.inferlane_over_naive" in targets
    for target in targets.values():
        assert set(target) == {"value", "target", "met"}
