"""Re-score a time range of a request topic, and say how the new outputs differ.

The range is first copied to a JSON Lines snapshot (one request per line, as
published), which then runs as an ordinary local job: resumable, exactly once, with
request ids kept as the id column. A rerun reuses the snapshot. The comparison joins
the job's results with the results stored for the same request ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaConsumer, TopicPartition
from sqlalchemy import select

from consumers.client import READER_CONFIG
from storage import ResultStore
from storage.jobs import JobStore
from storage.schema import inference_results
from worker.jobs.outputs import write_error_file

# Outputs closer than this count as unchanged (float noise between runs).
TOLERANCE = 1e-4
_POLL_MS = 500
_IN_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Snapshot:
    path: Path
    records: int  # written to the snapshot (for the model asked for, or unparseable)
    other_models: int  # requests for other models, left out


def snapshot_topic(
    bootstrap: str, topic: str, model: str, from_ms: int | None, to_ms: int | None, dest: Path
) -> Snapshot:
    """Copy the requests for ``model`` published in ``[from_ms, to_ms)`` to ``dest``."""
    written = other = 0
    tmp = dest.with_name(dest.name + ".tmp")
    with tmp.open("wb") as out:
        for value in _records(bootstrap, topic, from_ms, to_ms):
            try:
                request = orjson.loads(value)
            except orjson.JSONDecodeError:
                request = None
            if isinstance(request, dict) and request.get("model") != model:
                other += 1
                continue
            # Kept as it came when it cannot be read: the job lists it as a bad row.
            line = (
                orjson.dumps(request)
                if request is not None
                else orjson.dumps({"raw": str(value[:200])})
            )
            out.write(line + b"\n")
            written += 1
    tmp.replace(dest)
    return Snapshot(dest, written, other)


def _records(bootstrap: str, topic: str, from_ms: int | None, to_ms: int | None) -> Iterator[bytes]:
    """Values of every partition's records in the time range.

    Reads from the first offset at ``from_ms`` until a fetch comes back empty with the
    position at the fetch's high watermark: the embedded broker's end offsets count
    batches, not records, so they cannot say where a partition ends.
    """
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **READER_CONFIG)
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise ValueError(f"no topic {topic!r} on {bootstrap}")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        if from_ms is not None:
            for tp, found in consumer.offsets_for_times({tp: from_ms for tp in tps}).items():
                if found is not None:
                    consumer.seek(tp, found.offset)
        open_tps = set(tps)
        while open_tps:
            fetched = consumer.poll(timeout_ms=_POLL_MS)
            for tp, messages in fetched.items():
                for m in messages:
                    if to_ms is not None and m.timestamp >= to_ms:
                        open_tps.discard(tp)
                        consumer.pause(tp)
                        break
                    if from_ms is None or m.timestamp >= from_ms:
                        yield m.value
            for tp in list(open_tps):
                high = consumer.highwater(tp)
                if tp not in fetched and high is not None and consumer.position(tp) >= high:
                    open_tps.discard(tp)
    finally:
        consumer.close()


@dataclass(frozen=True, slots=True)
class Difference:
    compared: int  # rows with a stored result to compare against
    changed: int
    missing: int  # rows whose request id has no stored ok result
    path: Path  # the changed rows: request id, stored and new outputs


def compare(store: ResultStore, job: str, snapshot: Path, dest: Path) -> Difference:
    ids = [_request_id(line) for line in snapshot.read_bytes().splitlines()]
    new: dict[str, Any] = {}
    for row, status, outputs, _ in JobStore(store.engine).results(job):
        rid = ids[row]
        if status == "ok" and rid is not None:
            new[rid] = outputs
    stored = _stored(store, list(new))
    changed = [
        {"request_id": rid, "stored": stored[rid], "new": outputs}
        for rid, outputs in new.items()
        if rid in stored and differs(stored[rid], outputs)
    ]
    write_error_file(dest, changed)
    compared = sum(1 for rid in new if rid in stored)
    return Difference(compared, len(changed), len(new) - compared, dest)


def _request_id(line: bytes) -> str | None:
    try:
        request = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    rid = request.get("request_id") if isinstance(request, dict) else None
    return rid if isinstance(rid, str) else None


def _stored(store: ResultStore, ids: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    c = inference_results.c
    with store.engine.connect() as conn:
        for i in range(0, len(ids), _IN_CHUNK):
            query = select(c.request_id, c.outputs).where(
                c.request_id.in_(ids[i : i + _IN_CHUNK]), c.status == "ok"
            )
            found.update((rid, outputs) for rid, outputs in conn.execute(query))
    return found


def differs(stored: Any, new: Any) -> bool:
    """A classifier's label, or any number beyond the tolerance, changed."""
    if isinstance(stored, dict) and isinstance(new, dict):
        if "label" in stored or "label" in new:
            return stored.get("label") != new.get("label")
        return stored.keys() != new.keys() or any(differs(stored[k], new[k]) for k in stored)
    if isinstance(stored, list) and isinstance(new, list):
        return len(stored) != len(new) or any(
            differs(a, b) for a, b in zip(stored, new, strict=True)
        )
    if isinstance(stored, int | float) and isinstance(new, int | float):
        return not math.isclose(stored, new, rel_tol=TOLERANCE, abs_tol=TOLERANCE)
    return bool(stored != new)
