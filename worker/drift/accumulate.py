"""Window counts in memory, between flushes to SQL; references built from the first rows.

``add`` only files a batch's observation under its window: it runs on the event loop
for every batch served. ``take`` (once per flush) counts what was filed, one window at
a time over the concatenated values, so the numpy steps and their fixed cost run once
per window per flush instead of once per batch.

Until a model version has a reference for a series, that series' values wait here;
the first ``reference_rows`` of them become the reference, and every waiting value is
then binned into the window it arrived in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from storage.drift_records import (
    CATEGORICAL,
    INPUT,
    NUMERIC,
    OUTPUT,
    Reference,
    WindowDelta,
    WindowKey,
    window_start,
)
from storage.histograms import bin_numeric, counts_of, quantile_edges
from worker.drift.observe import Observation

SeriesKey = tuple[str, str, str]  # model, model_version, series


@dataclass(slots=True)
class _Waiting:
    kind: str
    classes: int
    parts: list[tuple[WindowKey, np.ndarray]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(values) for _, values in self.parts)


class WindowAccumulator:
    """Not thread-safe: one thread adds and takes."""

    def __init__(self, *, window_s: int, reference_rows: int, bins: int) -> None:
        self.window_s = window_s
        self._reference_rows = reference_rows
        self._bins = bins
        self.references: dict[SeriesKey, Reference] = {}
        self._waiting: dict[SeriesKey, _Waiting] = {}
        self._deltas: dict[WindowKey, WindowDelta] = {}
        self._new_references: list[Reference] = []
        self._filed: dict[WindowKey, list[Observation]] = {}  # added, not yet counted

    def add(self, obs: Observation, at: datetime) -> WindowKey:
        key = WindowKey(obs.model, obs.model_version, window_start(at, self.window_s))
        filed = self._filed.get(key)
        if filed is None:
            self._filed[key] = [obs]
        else:
            filed.append(obs)
        return key

    def _count_filed(self) -> None:
        """Count every filed observation, window by window, in the order they were added
        (the first rows of a version become its reference)."""
        filed, self._filed = self._filed, {}
        for key, observations in filed.items():
            delta = self._delta(key)
            delta.rows += sum(obs.rows for obs in observations)
            errors = [e for obs in observations for e in obs.abs_errors]
            if errors:
                delta.add_labels(errors)
            first = observations[0]
            outputs = [obs.outputs for obs in observations if obs.output_kind and len(obs.outputs)]
            if first.output_kind is not None and outputs:
                self._add_series(
                    key, OUTPUT, first.output_kind, first.classes, np.concatenate(outputs)
                )
            inputs = [obs.inputs for obs in observations if len(obs.inputs)]
            if inputs:
                self._add_series(key, INPUT, NUMERIC, 0, np.concatenate(inputs))

    def add_checks(self, key: WindowKey, checked: int, deviant: int) -> None:
        delta = self._delta(key)
        delta.ref_checked += checked
        delta.ref_deviant += deviant

    def take(self) -> tuple[dict[WindowKey, WindowDelta], list[Reference]]:
        """The counts and references gathered since the last call."""
        self._count_filed()
        deltas, refs = self._deltas, self._new_references
        self._deltas, self._new_references = {}, []
        return deltas, refs

    def restore(self, deltas: dict[WindowKey, WindowDelta], refs: list[Reference]) -> None:
        """Put back what ``take`` gave, after a failed flush, to be written next time."""
        for key, d in deltas.items():
            self._delta(key).merge(d)
        self._new_references[:0] = refs

    def _delta(self, key: WindowKey) -> WindowDelta:
        delta = self._deltas.get(key)
        if delta is None:
            delta = self._deltas[key] = WindowDelta()
        return delta

    def _add_series(
        self, key: WindowKey, series: str, kind: str, classes: int, values: np.ndarray
    ) -> None:
        skey = (key.model, key.model_version, series)
        ref = self.references.get(skey)
        if ref is not None:
            self._bin(key, ref, values)
            return
        waiting = self._waiting.setdefault(skey, _Waiting(kind, classes))
        waiting.parts.append((key, values))
        if waiting.rows >= self._reference_rows:
            del self._waiting[skey]
            ref = self._reference(skey, waiting)
            self.references[skey] = ref
            self._new_references.append(ref)
            for part_key, part in waiting.parts:
                self._bin(part_key, ref, part)

    def _reference(self, skey: SeriesKey, waiting: _Waiting) -> Reference:
        values = np.concatenate([v for _, v in waiting.parts])[: self._reference_rows]
        if waiting.kind == CATEGORICAL:
            counts = counts_of(values, waiting.classes)
            lowers: tuple[float | None, ...] = (None,) * waiting.classes
        else:
            edges = quantile_edges(values, self._bins)
            counts = counts_of(bin_numeric(edges, values), len(edges) + 1)
            lowers = (None, *edges)
        return Reference(*skey, waiting.kind, tuple(counts), lowers)

    def _bin(self, key: WindowKey, ref: Reference, values: np.ndarray) -> None:
        n = len(ref.counts)
        indexes = values if ref.kind == CATEGORICAL else bin_numeric(ref.edges, values)
        self._delta(key).add_bins(ref.series, counts_of(np.asarray(indexes), n))
