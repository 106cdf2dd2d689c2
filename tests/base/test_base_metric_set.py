"""A metric set registers what its class declares on the registry it is given."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from worker.base.metric_set import MetricSet, counter, gauge, histogram


class Example(MetricSet):
    done = counter("example_done", "Things done", "kind")
    depth = gauge("example_depth", "Things waiting")
    took = histogram("example_seconds", "Time taken", "kind", buckets=(0.1, 1.0))


def test_each_instance_registers_its_metrics_on_its_registry() -> None:
    one, two = Example(CollectorRegistry()), Example(CollectorRegistry())
    one.done.labels("a").inc(2)
    one.depth.set(5)
    one.took.labels("a").observe(0.5)
    assert one.registry.get_sample_value("example_done_total", {"kind": "a"}) == 2
    assert one.registry.get_sample_value("example_depth") == 5
    assert one.registry.get_sample_value("example_seconds_bucket", {"kind": "a", "le": "1.0"}) == 1
    assert two.registry.get_sample_value("example_done_total", {"kind": "a"}) is None


def test_a_registry_takes_a_set_once() -> None:
    registry = CollectorRegistry()
    Example(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Example(registry)
