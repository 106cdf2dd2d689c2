"""The priority scenario's backlog rate over a window: results arrive in chunks, and the
rate must not depend on where the window's edges fall between them."""

from __future__ import annotations

import pytest

from bench.kafka_io import ResultsReader
from bench.measure import Arrival
from bench.scenarios.priority import HIGH, low_rate


def _reader() -> ResultsReader:
    """Backlog chunks of 50 results every 0.25 s (200/s) for 10 s, and one high result
    alone 0.1 s after each chunk."""
    reader = ResultsReader("unused:9092")
    for i in range(40):
        t = 1000.0 + 0.25 * i
        reader.arrivals.append(Arrival(t, t, [b"bulk-%d" % j for j in range(50)]))
        high = f"{HIGH}-{i}".encode()
        reader.arrivals.append(Arrival(t + 0.1, t + 0.1, [high]))
    return reader


@pytest.mark.parametrize("offset_s", [0.0, 0.05, 0.12, 0.2, 0.24])
def test_the_rate_is_the_chunks_rate_wherever_the_window_starts(offset_s: float) -> None:
    reader = _reader()
    start = 1001.0 + offset_s
    assert low_rate(reader, start, start + 5.1) == pytest.approx(200.0)


def test_high_results_and_arrivals_outside_the_window_do_not_count() -> None:
    reader = _reader()
    # Only high results in the window: no backlog rate.
    assert low_rate(reader, 1000.3, 1000.4) == 0.0
    # Two chunks: 50 results counted over the 0.25 s between them.
    assert low_rate(reader, 1000.2, 1000.55) == pytest.approx(200.0)
