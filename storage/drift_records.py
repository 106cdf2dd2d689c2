"""Plain records of the drift windows: what the worker adds and what readers get back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

CATEGORICAL = "categorical"
NUMERIC = "numeric"
OUTPUT = "output"  # series: the prediction (class label or number)
INPUT = "input"  # series: the mean of a numeric input's features
WRONG_ABOVE = 0.5  # a labelled row is wrong when |output - expected| exceeds this


def as_utc(value: datetime) -> datetime:
    """SQLite hands timestamps back naive; they were written as UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def window_start(at: datetime, window_s: int) -> datetime:
    """The start of the ``window_s``-long window holding ``at`` (aligned to the epoch)."""
    epoch_s = int(at.timestamp())
    return datetime.fromtimestamp(epoch_s - epoch_s % window_s, UTC)


# The counters a window sums, in a delta of it and in stored windows alike.
COUNTERS = ("rows", "labelled", "wrong", "abs_error_sum", "ref_checked", "ref_deviant")


def add_counters(into: WindowDelta | WindowStats, other: WindowDelta | WindowStats) -> None:
    for name in COUNTERS:
        setattr(into, name, getattr(into, name) + getattr(other, name))


@dataclass(frozen=True, slots=True)
class WindowKey:
    model: str
    model_version: str
    window_start: datetime


@dataclass(slots=True)
class WindowDelta:
    """Counts to add to one window; ``bins`` maps (series, bin) to a count."""

    rows: int = 0
    labelled: int = 0
    wrong: int = 0
    abs_error_sum: float = 0.0
    bins: dict[tuple[str, int], int] = field(default_factory=dict)
    ref_checked: int = 0
    ref_deviant: int = 0

    def add_label(self, abs_error: float) -> None:
        self.labelled += 1
        self.wrong += abs_error > WRONG_ABOVE
        self.abs_error_sum += abs_error

    def add_labels(self, abs_errors: Sequence[float] | np.ndarray) -> None:
        """``add_label`` for each, in whole-array steps (a batch's labelled rows)."""
        errors = np.asarray(abs_errors, dtype=np.float64)
        self.labelled += len(errors)
        self.wrong += int(np.count_nonzero(errors > WRONG_ABOVE))
        self.abs_error_sum += float(errors.sum())

    def add_bins(self, series: str, counts: list[int]) -> None:
        for i, n in enumerate(counts):
            if n:
                self.bins[(series, i)] = self.bins.get((series, i), 0) + n

    def merge(self, other: WindowDelta) -> None:
        """Add ``other``'s counts to these."""
        add_counters(self, other)
        for key, n in other.bins.items():
            self.bins[key] = self.bins.get(key, 0) + n


@dataclass(frozen=True, slots=True)
class Reference:
    """A fixed-bin reference histogram; numeric bins have lower edges (first: -inf)."""

    model: str
    model_version: str
    series: str
    kind: str  # CATEGORICAL or NUMERIC
    counts: tuple[int, ...]
    lowers: tuple[float | None, ...]  # per bin; None for -inf or a categorical bin

    @property
    def edges(self) -> list[float]:
        """Inner edges for ``histograms.bin_numeric``."""
        return [lower for lower in self.lowers[1:] if lower is not None]

    @property
    def rows(self) -> int:
        return sum(self.counts)


@dataclass(slots=True)
class WindowStats:
    """One stored window (or several merged): labelled error and histograms."""

    model: str
    model_version: str
    start: datetime
    span_s: int
    rows: int = 0
    labelled: int = 0
    wrong: int = 0
    abs_error_sum: float = 0.0
    bins: dict[str, dict[int, int]] = field(default_factory=dict)  # series -> bin -> count
    ref_checked: int = 0
    ref_deviant: int = 0

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.span_s)

    @property
    def error_rate(self) -> float | None:
        return self.wrong / self.labelled if self.labelled else None

    @property
    def mean_abs_error(self) -> float | None:
        return self.abs_error_sum / self.labelled if self.labelled else None

    def counts(self, series: str, bins: int) -> list[int]:
        got = self.bins.get(series, {})
        return [got.get(i, 0) for i in range(bins)]

    def absorb(self, other: WindowStats) -> None:
        """Add ``other`` (the next window) to this one."""
        self.span_s = int((other.end - self.start).total_seconds())
        add_counters(self, other)
        for series, bins in other.bins.items():
            mine = self.bins.setdefault(series, {})
            for b, n in bins.items():
                mine[b] = mine.get(b, 0) + n


def merge_windows(
    windows: list[WindowStats], *, span_s: int | None = None, min_rows: int | None = None
) -> list[WindowStats]:
    """Consecutive stored windows of each model version joined into larger ones: each
    at least ``span_s`` long, or holding at least ``min_rows`` rows (the last may fall
    short). ``windows`` come ordered by model, version, start, as ``read_windows`` gives."""
    if span_s is None and min_rows is None:
        return windows
    out: list[WindowStats] = []
    for w in windows:
        last = out[-1] if out else None
        same = last is not None and (last.model, last.model_version) == (w.model, w.model_version)
        if last is not None and same and not _full(last, span_s, min_rows):
            last.absorb(w)
            continue
        out.append(_copy(w))
    return out


def _full(w: WindowStats, span_s: int | None, min_rows: int | None) -> bool:
    if span_s is not None:
        return w.span_s >= span_s
    return min_rows is not None and w.rows >= min_rows


def _copy(w: WindowStats) -> WindowStats:
    bins = {series: dict(counts) for series, counts in w.bins.items()}
    return WindowStats(
        w.model,
        w.model_version,
        w.start,
        w.span_s,
        w.rows,
        w.labelled,
        w.wrong,
        w.abs_error_sum,
        bins,
        w.ref_checked,
        w.ref_deviant,
    )
