"""The window accumulator files batches and counts them at ``take``: the counts and the
reference must be what counting each batch on its own gives."""

from __future__ import annotations

from storage.drift_records import WindowDelta, WindowKey
from tests.drift.drift_factories import WINDOW_S, stream
from worker.drift.accumulate import WindowAccumulator


def _merged(parts: list[dict[WindowKey, WindowDelta]]) -> dict[WindowKey, WindowDelta]:
    """The deltas of several takes, summed per window (as SQL would add them)."""
    out: dict[WindowKey, WindowDelta] = {}
    for deltas in parts:
        for key, d in deltas.items():
            out.setdefault(key, WindowDelta()).merge(d)
    return out


def test_counting_filed_batches_at_take_equals_counting_each_batch() -> None:
    batches = list(stream(seed=3, windows=3, per_window=400, shift_at=2))
    once = WindowAccumulator(window_s=WINDOW_S, reference_rows=500, bins=10)
    each = WindowAccumulator(window_s=WINDOW_S, reference_rows=500, bins=10)
    keys, parts, refs_each = set(), [], []
    for at, obs in batches:
        keys.add(once.add(obs, at))
        each.add(obs, at)
        deltas, refs = each.take()
        parts.append(deltas)
        refs_each += refs
    deltas_once, refs_once = once.take()

    assert len(keys) == 3 and set(deltas_once) == keys
    expected = _merged(parts)
    assert set(expected) == keys
    for key in keys:
        got, want = deltas_once[key], expected[key]
        assert (got.rows, got.labelled, got.wrong) == (want.rows, want.labelled, want.wrong)
        assert abs(got.abs_error_sum - want.abs_error_sum) < 1e-9
        assert got.bins == want.bins
    # The reference is built from the first 500 rows either way (it spans two windows).
    assert refs_once == refs_each and len(refs_once) == 2  # outputs and inputs
    assert sum(expected[k].rows for k in keys) == 1200
    assert once.take() == ({}, [])  # nothing counted twice


def test_counts_put_back_after_a_failed_flush_are_written_with_the_next_ones() -> None:
    batches = list(stream(seed=5, windows=2, per_window=300, shift_at=1))
    failed = WindowAccumulator(window_s=WINDOW_S, reference_rows=500, bins=10)
    whole = WindowAccumulator(window_s=WINDOW_S, reference_rows=500, bins=10)
    for i, (at, obs) in enumerate(batches):
        failed.add(obs, at)
        whole.add(obs, at)
        if i == len(batches) // 2:
            failed.restore(*failed.take())  # the flush's write failed

    assert failed.take() == whole.take()
