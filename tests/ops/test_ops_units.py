"""Pure parts of the ops surface: chunked histograms, quantiles, log scrubbing."""

from __future__ import annotations

import logging

import orjson
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from worker.ops.logs import JsonFormatter, scrub
from worker.ops.metrics import LATENCY_BUCKETS_S, ChunkHistogram
from worker.ops.registry_read import Snapshot, minus, quantile

VALUES = [0.0005, 0.001, 0.003, 0.003, 0.07, 0.5, 0.5, 2.0, 31.0, 0.025]


def _lines(registry: CollectorRegistry, name: str) -> list[str]:
    text = generate_latest(registry).decode()
    return sorted(ln for ln in text.splitlines() if ln.startswith(name) and "_created" not in ln)


def test_chunk_histogram_exposes_what_observe_would() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    chunked = ChunkHistogram("x_seconds", "x", ["lane"], LATENCY_BUCKETS_S)
    ours.register(chunked)
    chunked.observe_many(("high",), VALUES[:4])
    chunked.observe_many(("high",), VALUES[4:])
    chunked.observe_many(("low",), [])
    reference = Histogram("x_seconds", "x", ["lane"], buckets=LATENCY_BUCKETS_S, registry=theirs)
    for v in VALUES:
        reference.labels("high").observe(v)
    assert _lines(ours, "x_seconds") == _lines(theirs, "x_seconds")


def test_quantile_interpolates_like_prometheus() -> None:
    cumulative = {0.1: 0.0, 0.5: 60.0, float("inf"): 60.0}
    assert quantile(0.5, cumulative) == 0.1 + 0.4 * 0.5
    assert quantile(0.99, {0.1: 10.0, float("inf"): 20.0}) == 0.1  # in +Inf: top bound
    assert quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None
    assert minus({1.0: 5.0}, {1.0: 2.0}) == {1.0: 3.0}
    assert minus({1.0: 1.0}, {1.0: 4.0}) == {1.0: 1.0}  # a restart: the counter reset


def test_snapshot_sums_over_other_labels() -> None:
    registry = CollectorRegistry()
    chunked = ChunkHistogram("y_seconds", "y", ["lane", "model"], LATENCY_BUCKETS_S)
    registry.register(chunked)
    chunked.observe_many(("high", "a"), [0.002, 0.002])
    chunked.observe_many(("high", "b"), [0.2])
    snapshot = Snapshot.of(registry)
    assert snapshot.total("y_seconds_count", "lane") == {"high": 3.0}
    assert snapshot.buckets("y_seconds", "lane")["high"][float("inf")] == 3.0


def test_logs_mask_url_passwords_and_keep_only_known_fields() -> None:
    assert scrub("postgresql+psycopg://u:p4ss@db:5432/x") == "postgresql+psycopg://u:***@db:5432/x"
    assert scrub("no url here: a:b@c") == "no url here: a:b@c"
    driver = (
        "(psycopg.OperationalError) server closed the connection\n"
        "[SQL: INSERT INTO inference_results (request_id, outputs)\nVALUES (%s, %s)]\n"
        "[parameters: ('r1', '{\"secret\": [1, 2]}')]\n"
        "(Background on this error at: https://sqlalche.me/e/20/e3q8)"
    )
    cleaned = scrub(driver)
    assert cleaned.startswith("(psycopg.OperationalError) server closed the connection\n")
    assert "secret" not in cleaned and "INSERT" not in cleaned
    assert cleaned.endswith("(Background on this error at: https://sqlalche.me/e/20/e3q8)")
    assert "secret" not in scrub(driver.rsplit("\n", 1)[0])  # without the trailer too
    record = logging.LogRecord("t", logging.WARNING, __file__, 1, "to %s", ("pg://u:pw@h/d",), None)
    record.request_id, record.inputs = "r1", [1, 2, 3]
    entry = orjson.loads(JsonFormatter().format(record))
    assert entry["message"] == "to pg://u:***@h/d"
    assert entry["request_id"] == "r1" and "inputs" not in entry
