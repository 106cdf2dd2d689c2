"""A distributed job: chunks of the input go out as descriptors on the jobs topic, and
the workers of the group each claim, score and commit theirs
(``worker.jobs.chunk_service``).

``publish`` creates the job and its chunks in SQL (row ranges, ``worker.jobs.chunks``),
then sends a descriptor for each chunk not done, round robin over the topic's
partitions, each one acknowledged before the job reads ``published``. A rerun sends
the chunks not done again, failed ones included (a duplicate descriptor is harmless: a
chunk is held by one worker at a time, and a done one is never claimed again).
``export_job`` assembles the committed part files in input order once every chunk is
done.
"""

from __future__ import annotations

import asyncio
import zlib

from aiokafka import AIOKafkaProducer
from sqlalchemy import Engine

from consumers.topics import ensure_topics
from storage import ResultStore
from storage.job_chunks import ChunkStore, Span
from storage.jobs import CANCELLED, DONE, PUBLISHED, JobRecord, JobStore
from worker.jobs.chunk_parts import ChunkParts, assemble, assemble_errors, parts_folder
from worker.jobs.chunks import WINDOWS_PER_CHUNK, ChunkDescriptor, plan
from worker.jobs.liveness import running
from worker.jobs.local import open_job
from worker.jobs.outputs import ERRORS_SUFFIX
from worker.jobs.params import JobParams
from worker.jobs.sources import Source, sibling
from worker.models import ModelRegistry
from worker.settings import WorkerSettings


class ExportError(Exception):
    """The job is unknown, not distributed, or not complete yet."""


def publish(
    name: str,
    params: JobParams,
    registry: ModelRegistry,
    store: ResultStore,
    bootstrap: str,
    *,
    settings: WorkerSettings | None = None,
    chunk_rows: int | None = None,
) -> JobRecord:
    """Plan the job's chunks (on first use) and send the descriptors of those not done;
    ``chunk_rows`` defaults to four of the model's windows."""
    settings = settings or WorkerSettings()
    jobs, chunks = JobStore(store.engine), ChunkStore(store.engine)
    record = open_job(jobs, name, params, kind="distributed")
    window = params.window_for(registry.adapter(params.model))
    spans = plan(
        params.input, chunk_rows or WINDOWS_PER_CHUNK * window, window, record.rows_total or 0
    )
    chunks.add(name, spans)
    if not spans:  # an empty input: nothing for the workers to do
        jobs.finish(name)
    elif record.state == PUBLISHED:  # sent before: send again what is not done
        asyncio.run(_send(name, params, chunks.unfinished(name), bootstrap, settings))
    elif record.state != DONE:
        with running(jobs, name):
            asyncio.run(_send(name, params, chunks.unfinished(name), bootstrap, settings))
            jobs.published(name)
    final = jobs.get(name)
    assert final is not None
    return final


async def _send(
    name: str,
    params: JobParams,
    unfinished: list[tuple[int, Span, int]],
    bootstrap: str,
    settings: WorkerSettings,
) -> None:
    topic, security = settings.topics.jobs, settings.kafka.security
    if topic is None:
        raise ValueError("distributed jobs need a jobs topic (settings.topics.jobs)")
    await ensure_topics(
        bootstrap, [topic], partitions=settings.topics.partitions, security=security
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=f"inferlane-job-{name}",
        acks="all",
        **security.aiokafka_kwargs(),
    )
    await producer.start()
    try:
        partitions = sorted(await producer.partitions_for(topic))
        first = zlib.crc32(name.encode())  # each job's chunks begin on another partition
        sent = []
        for chunk, span, checkpoint in unfinished:
            descriptor = ChunkDescriptor(
                job=name,
                chunk=chunk,
                input=str(params.input),
                start=span.start,
                rows=span.rows,
                checkpoint=checkpoint,
            )
            sent.append(
                await producer.send(
                    topic,
                    descriptor.model_dump_json().encode(),
                    key=f"{name}:{chunk}".encode(),
                    partition=partitions[(first + chunk) % len(partitions)],
                )
            )
        await asyncio.gather(*sent)  # every descriptor acknowledged
    finally:
        await producer.stop()


def export_job(name: str, engine: Engine, output: Source | None = None) -> int:
    """Write the job's outputs in input order, and its bad rows beside them; return the
    rows written. ``output`` defaults to the job's own ``--output``."""
    jobs, chunks = JobStore(engine), ChunkStore(engine)
    record = jobs.get(name)
    if record is None or record.kind != "distributed":
        raise ExportError(f"no distributed job {name!r}")
    if record.state == CANCELLED:
        raise ExportError(f"job {name!r} was cancelled")
    if record.state != DONE:
        states = chunks.states(name)
        done = states.counts.get(DONE, 0)
        raise ExportError(
            f"job {name!r} is not complete: {done:,} of {states.total:,} chunks done "
            f"({record.checkpoint:,} of {record.rows_total or 0:,} rows)"
        )
    params = JobParams.model_validate(record.params)
    dest = output or params.output
    if dest is None:
        raise ExportError(f"job {name!r} has no output file: give one with --output")
    parts = ChunkParts(parts_folder(name, params))
    committed = chunks.parts(name)
    written = assemble(parts, committed, dest)
    assemble_errors(parts, committed, sibling(dest, ERRORS_SUFFIX))
    return written
