"""One claimed chunk of a distributed job, scored through the local job's path.

Per window, as a local job does: read (only the chunk's rows), decode, score with the
registry's model and the batch controller, write the window's part files, then one SQL
transaction with its result and drift rows, its part files' names, the chunk's
checkpoint and the job's counters. A claim lost meanwhile (another worker took the
chunk over, the job was cancelled) rolls that transaction back and ends the run; the
next holder starts from the checkpoint, so every row is committed once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial

from storage import ResultStore
from storage.job_chunks import ChunkStore, Claim, Part
from storage.jobs import JobConflict, JobStore, WindowCounts
from worker.execution.aside import Submit, submit_rows
from worker.jobs.batch_size import BatchSizer
from worker.jobs.chunk_parts import ChunkParts, parts_folder
from worker.jobs.decode import Decoded, decode
from worker.jobs.params import JobParams
from worker.jobs.prefetch import prefetched
from worker.jobs.rows import window_result
from worker.jobs.sources import Window, windows
from worker.models import ModelRegistry


class ChunkRunner:
    """Runs claimed chunks, one at a time, on the caller's thread; their forward passes
    go to ``submit`` (the worker's executor, on its low lane). A batch sizer per model
    lives as long as the runner, so what one chunk measured of the batch sizes carries
    over to the next."""

    def __init__(self, registry: ModelRegistry, store: ResultStore, submit: Submit) -> None:
        self._registry = registry
        self._store = store
        self._jobs = JobStore(store.engine)
        self.chunks = ChunkStore(store.engine)
        self._submit = submit
        self._sizers: dict[tuple[str, int | None], BatchSizer] = {}

    def run(self, claim: Claim, stop: threading.Event) -> bool:
        """Score the chunk from its checkpoint; False if it stopped early (``stop`` set,
        or the claim lost), True once its last window is committed."""
        record = self._jobs.get(claim.job)
        if record is None:
            return False
        params = JobParams.model_validate(record.params)
        parts = ChunkParts(parts_folder(claim.job, params))
        parts.discard(claim)
        sizer = self._sizer(params)
        forward = partial(submit_rows, self._submit, params.model)
        checkpoint = claim.checkpoint
        try:
            for window, decoded in prefetched(self._decoded(claim, params)):
                if stop.is_set():
                    return False
                end = window.start + len(window)
                result = window_result(
                    claim.job,
                    window,
                    decoded,
                    self._registry.get(params.model),  # loaded again if the store evicted it
                    sizer,
                    forward,
                    sql_results=params.sql_results,
                    later=claim.end - end,
                )
                part = parts.write(claim, window.start, result.table, result.errors)
                step = self.chunks.commit_window(
                    claim, window.start, result.counts, part, last=end >= claim.end
                )
                self._store.write_columns(result.results, result.drift, also=step)
                checkpoint = end
            if checkpoint < claim.end:  # the input ended before the chunk's last row
                empty = Part(checkpoint, 0, None, None)
                step = self.chunks.commit_window(
                    claim, checkpoint, WindowCounts(0), empty, last=True
                )
                self._store.write([], [], [], also=step)
        except JobConflict:
            return False
        return True

    def _decoded(self, claim: Claim, params: JobParams) -> Iterator[tuple[Window, Decoded]]:
        adapter = self._registry.adapter(params.model)
        columns = params.columns
        for window in windows(
            params.input,
            params.window_for(adapter),
            start=claim.checkpoint,
            origin=claim.start,
            end=claim.end,
            columns=columns.names,
        ):
            yield window, decode(window, adapter, columns)

    def _sizer(self, params: JobParams) -> BatchSizer:
        key = (params.model, params.batch_size)
        if key not in self._sizers:
            spec = self._registry.spec(params.model)
            max_batch = self._registry.get(params.model).max_batch
            self._sizers[key] = BatchSizer(spec.scheduling, max_batch, fixed=params.batch_size)
        return self._sizers[key]
