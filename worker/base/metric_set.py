"""How a stage declares its Prometheus metrics: class attributes of a ``MetricSet``, each
registered on the registry that an instance is made with (the worker's, in a worker).

    class DriftMetrics(MetricSet):
        flags = counter("inferlane_drift_flags", "Windows that crossed a threshold", "model")

    DriftMetrics(registry).flags.labels("digits").inc()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

M = TypeVar("M", Counter, Gauge, Histogram)


@dataclass
class Declared(Generic[M]):
    """One metric of a ``MetricSet``: on an instance, the metric registered for it."""

    kind: type[M]
    name: str
    doc: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] | None = None
    attr: str = field(default="", init=False)  # the attribute it is declared as

    def register(self, registry: CollectorRegistry) -> M:
        extra: dict[str, Any] = {} if self.buckets is None else {"buckets": self.buckets}
        return self.kind(self.name, self.doc, self.labels, registry=registry, **extra)

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    @overload
    def __get__(self, instance: None, owner: type) -> Declared[M]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> M: ...
    def __get__(self, instance: object | None, owner: type) -> Declared[M] | M:
        if instance is None:
            return self
        metric: M = instance.__dict__[self.attr]
        return metric


def counter(name: str, doc: str, *labels: str) -> Declared[Counter]:
    return Declared(Counter, name, doc, labels)


def gauge(name: str, doc: str, *labels: str) -> Declared[Gauge]:
    return Declared(Gauge, name, doc, labels)


def histogram(name: str, doc: str, *labels: str, buckets: Sequence[float]) -> Declared[Histogram]:
    return Declared(Histogram, name, doc, labels, tuple(buckets))


class MetricSet:
    """Registers every metric its class declares on ``registry`` (a new one if None)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        for cls in reversed(type(self).__mro__):
            for attr, value in vars(cls).items():
                if isinstance(value, Declared):
                    self.__dict__[attr] = value.register(self.registry)
