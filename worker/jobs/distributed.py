"""A distributed job: rows become requests on the low lane; every worker scores its share.

Each good row is published as request ``"{job}:{row}"`` (metadata ``{"job", "row"}``,
its label as ``expected``) through the worker's ``Egress``, so the workers' usual path
stores exactly one result per row in the shared database. Bad rows never leave: they are
stored as ``rejected`` results and listed in the errors file, as are rows the broker
refuses for good. The job's checkpoint counts rows published and acknowledged by Kafka;
a rerun publishes from there (a row published twice still has one result, the upsert
keeps one row per request id). ``export_job`` writes the outputs in input order once
every row has a result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from consumers.contract import Priority, Status
from consumers.egress import Egress, OutRecord, Refused
from consumers.topics import ensure_topics
from storage import ResultStore
from storage.jobs import CANCELLED, PUBLISHED, JobRecord, JobStore, WindowCounts
from worker.jobs.decode import Decoded, RowError, decode, number_or_nan
from worker.jobs.liveness import running
from worker.jobs.local import open_job
from worker.jobs.outputs import (
    Parts,
    errors_path,
    output_table,
    write_error_file,
    write_table_file,
)
from worker.jobs.params import JobParams
from worker.jobs.rows import error_line, error_row, expected_column, usable_labels
from worker.jobs.sources import windows
from worker.models import ClassifierAdapter, ModelRegistry
from worker.settings import WorkerSettings


class ExportError(Exception):
    """The job is unknown, not distributed, or not complete yet."""


def errors_file(name: str, params: JobParams) -> Path:
    base = params.output or params.input.with_name(f"{params.input.name}.{name}")
    return errors_path(base)


def publish(
    name: str,
    params: JobParams,
    registry: ModelRegistry,
    store: ResultStore,
    bootstrap: str,
    *,
    settings: WorkerSettings | None = None,
) -> JobRecord:
    """Publish the rows not yet published; return the job once every row is out."""
    settings = settings or WorkerSettings()
    jobs = JobStore(store.engine)
    record = open_job(jobs, name, params, kind="distributed")
    if record.state == PUBLISHED:
        return record
    parts = Parts(errors_file(name, params))
    with running(jobs, name):
        parts.discard_from(record.checkpoint)
        start = record.checkpoint
        asyncio.run(_publish_from(start, name, params, registry, store, bootstrap, settings))
        parts.assemble_errors(errors_file(name, params))
        parts.remove()
        jobs.set_state(name, PUBLISHED)
    final = jobs.get(name)
    assert final is not None
    return final


async def _publish_from(
    start: int,
    name: str,
    params: JobParams,
    registry: ModelRegistry,
    store: ResultStore,
    bootstrap: str,
    settings: WorkerSettings,
) -> None:
    """Per window: its requests through the worker's ``Egress`` (one record batch per
    partition, every record acknowledged), then its bad rows and the checkpoint in one
    transaction. A record the broker refuses for good (too large) is a bad row."""
    topic, kafka = settings.topics.low, settings.kafka
    await ensure_topics(bootstrap, [topic], partitions=settings.topics.partitions)
    jobs = JobStore(store.engine)
    adapter = registry.adapter(params.model)
    parts = Parts(errors_file(name, params))
    egress = Egress(
        bootstrap=bootstrap,
        client_id=f"inferlane-job-{name}",
        linger_ms=kafka.linger_ms,
        max_request_bytes=kafka.max_request_bytes,
        metadata_timeout_s=kafka.metadata_timeout_ms / 1000,
        stable_topics=frozenset({topic}),
        security=kafka.security,
    )
    await egress.start()
    try:
        for window in windows(
            params.input, params.window_for(adapter), start=start, columns=params.columns.names
        ):
            decoded = decode(window, adapter, params.columns)
            records = [
                OutRecord(topic, key, value)
                for key, value in _requests(name, params.model, decoded, registry)
            ]
            # Acknowledged (or refused) before the checkpoint moves past these rows.
            refused = await egress.publish(records)
            errors = sorted(
                decoded.errors + _refused_rows(refused, decoded),
                key=lambda e: (e.row is None, e.row or 0),
            )
            parts.write(window.start, pa.table({}), [error_line(e) for e in errors])
            now = datetime.now(UTC)
            rejected = [
                error_row(name, window.start, params.model, None, e, now)
                for e in errors
                if e.row is not None
            ]
            counts = WindowCounts(len(window), len(errors))
            store.write(rejected, [], [], also=jobs.advance(name, window.start, counts))
    finally:
        await egress.stop()


def _refused_rows(refused: list[Refused], decoded: Decoded) -> list[RowError]:
    errors = []
    for r in refused:
        assert r.record.key is not None  # every request is keyed by its id
        row = int(r.record.key.rsplit(b":", 1)[1])
        at = int(np.searchsorted(decoded.rows, row))  # good rows, in row order
        rid = decoded.ids[at].as_py() if decoded.ids is not None else None
        errors.append(RowError(row, rid, f"refused by Kafka: {r.reason}"))
    return errors


def _requests(
    name: str, model: str, decoded: Decoded, registry: ModelRegistry
) -> Iterator[tuple[bytes, bytes]]:
    items = decoded.items
    values = items.tolist() if isinstance(items, np.ndarray) else items
    expected: list[Any] = [None] * len(values)
    if decoded.expected is not None:
        usable = usable_labels(registry.adapter(model), decoded.expected)
        labels = decoded.expected.tolist()
        integral = _integral_labels(registry, model)
        expected = [
            (int(y) if integral else y) if ok else None
            for y, ok in zip(labels, usable.tolist(), strict=True)
        ]
    for row, inputs, label in zip(decoded.rows.tolist(), values, expected, strict=True):
        rid = f"{name}:{row}"
        request: dict[str, Any] = {
            "request_id": rid,
            "model": model,
            "inputs": inputs,
            "priority": Priority.LOW.value,
            "metadata": {"job": name, "row": row},
        }
        if label is not None:
            request["expected"] = label
        yield rid.encode(), orjson.dumps(request)


def _integral_labels(registry: ModelRegistry, model: str) -> bool:
    return isinstance(registry.adapter(model), ClassifierAdapter)


def export_job(name: str, store: ResultStore, output: Path) -> int:
    """Write the job's outputs in input order; return the rows written."""
    jobs = JobStore(store.engine)
    record = jobs.get(name)
    if record is None or record.kind != "distributed":
        raise ExportError(f"no distributed job {name!r}")
    if record.state == CANCELLED:
        raise ExportError(f"job {name!r} was cancelled")
    total = record.rows_total or 0
    results = jobs.results(name)
    if record.state != PUBLISHED or len(results) < total:
        raise ExportError(
            f"job {name!r} is not complete: {len(results):,} of {total:,} rows have results"
        )
    params = JobParams.model_validate(record.params)
    ids = _input_column(params, params.id_column) if params.id_column else None
    ok = [(row, outputs) for row, status, outputs, _ in results if status == Status.OK.value]
    rows = [row for row, _ in ok]
    columns: dict[str, pa.Array] = {"row": pa.array(rows, type=pa.int64())}
    if ids is not None:
        columns["id"] = pa.array([ids[r] for r in rows])
    predictions = _output_columns([o for _, o in ok])
    truth = None
    if params.label_column:
        labels = _input_column(params, params.label_column)
        numbers = np.array([number_or_nan(labels[r]) for r in rows], dtype=np.float64)
        truth = expected_column(numbers, classes="label" in predictions)
    write_table_file(output, output_table(columns, predictions, truth))
    failed = [
        error_line(RowError(row, ids[row] if ids else None, message or status))
        for row, status, _, message in results
        if status != Status.OK.value
    ]
    write_error_file(errors_path(output), failed)
    return len(rows)


def _output_columns(outputs: list[Any]) -> dict[str, pa.Array]:
    if outputs and all(isinstance(o, dict) for o in outputs):
        keys = list(outputs[0])
        return {k: pa.array([o.get(k) for o in outputs]) for k in keys}
    name = "embedding" if outputs and isinstance(outputs[0], list) else "output"
    return {name: pa.array(outputs)}


def _input_column(params: JobParams, column: str) -> list[Any]:
    """A column of the whole input, by row number."""
    values: list[Any] = []
    for window in windows(params.input, 65_536, start=0, columns=[column]):
        if window.lines is not None:
            values += [_line_value(line, column) for line in window.lines]
        else:
            assert window.table is not None
            values += window.table.column(column).to_pylist()
    return values


def _line_value(line: bytes, column: str) -> Any:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return obj.get(column) if isinstance(obj, dict) else None
