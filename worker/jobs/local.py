"""A local job: score a file in one process, exactly once, resumable after any crash.

Per window of rows: decode, score, write the output part (atomic rename), then one SQL
transaction holds the window's results, drift rows and the job's checkpoint. A crash
before that commit leaves a part past the checkpoint, which the next run deletes and
recomputes: at most the one window in flight is scored again, and nothing reaches the
output or SQL twice. When every window is in, the parts become the output file.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from storage import ResultStore
from storage.jobs import CANCELLED, DONE, JobConflict, JobRecord, JobStore
from worker.execution.aside import submit_rows
from worker.execution.executor import ThreadExecutor
from worker.jobs.batch_size import BatchSizer
from worker.jobs.decode import Decoded, decode
from worker.jobs.generation import generated_window
from worker.jobs.liveness import running
from worker.jobs.outputs import Parts, parts_dir
from worker.jobs.params import JobParams
from worker.jobs.prefetch import prefetched
from worker.jobs.rows import WindowResult, window_result
from worker.jobs.sources import Window, count_rows, windows
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel
from worker.settings import SchedulingConfig

# A window's decoded rows, and how many rows of the job come after it, to its result.
WindowScorer = Callable[[Window, Decoded, int], WindowResult]


class JobError(Exception):
    """The job cannot run as asked (finished, cancelled, other parameters, running elsewhere)."""


class OutputExists(JobError):
    """The output file exists and is not this job's: replacing it needs ``overwrite``."""


@dataclass(frozen=True, slots=True)
class Progress:
    done_rows: int  # rows committed so far, this run and earlier ones
    total_rows: int | None


class LocalJob:
    def __init__(
        self,
        name: str,
        params: JobParams,
        registry: ModelRegistry,
        store: ResultStore,
        *,
        on_progress: Callable[[Progress], None] = lambda _: None,
        overwrite: bool = False,
    ) -> None:
        """``overwrite``: a new job may replace an existing output file (a rerun of the
        same job, which resumes or reports it, always may: the file is its own)."""
        if not isinstance(params.output, Path) or not isinstance(params.input, Path):
            raise ValueError("a local job reads and writes local files")
        self.name = name
        self.params = params
        self._output = params.output
        self._overwrite = overwrite
        self._registry = registry
        self._store = store
        self._jobs = JobStore(store.engine)
        self._on_progress = on_progress
        self.sizer: BatchSizer | None = None  # this run's batch sizes, once it scores

    def run(self) -> JobRecord:
        if not self._overwrite and self._output.exists() and self._jobs.get(self.name) is None:
            raise OutputExists(
                f"{self._output} exists and is not the output of job {self.name!r}: "
                "pass --overwrite to replace it, or choose another --output"
            )
        record = open_job(self._jobs, self.name, self.params, kind="local")
        if record.state == DONE:
            shutil.rmtree(parts_dir(self._output), ignore_errors=True)  # if a crash left it
            return record
        parts = Parts(self._output)
        try:
            with _exclusive(parts.folder, self.name), running(self._jobs, self.name):
                recomputed = parts.discard_from(record.checkpoint)
                if recomputed:
                    self._jobs.add_recomputed(self.name, recomputed)
                self._score(record, parts)
                parts.assemble()
                self._jobs.finish(self.name)
                parts.remove()
        except JobConflict as exc:  # cancelled meanwhile: this window rolled back
            raise JobError(str(exc)) from None
        final = self._jobs.get(self.name)
        assert final is not None
        return final

    def _score(self, record: JobRecord, parts: Parts) -> None:
        model = self._registry.get(self.params.model)
        self._on_progress(Progress(record.checkpoint, record.rows_total))
        if isinstance(model, GenerativeModel):
            self._windows(record, parts, self._generating(model))
            return
        sizer = self.sizer = BatchSizer(
            self._registry.spec(self.params.model).scheduling,
            model.max_batch,
            fixed=self.params.batch_size,
        )
        # Its own executor: one compute thread, as a worker's jobs have their own.
        executor = ThreadExecutor(self._registry.get)
        forward = partial(submit_rows, executor.submit, self.params.model)

        def scored(window: Window, decoded: Decoded, later: int) -> WindowResult:
            return window_result(
                self.name,
                window,
                decoded,
                model,
                sizer,
                forward,
                sql_results=self.params.sql_results,
                later=later,
            )

        try:
            self._windows(record, parts, scored)
        finally:
            executor.shutdown()

    def _generating(self, model: GenerativeModel) -> WindowScorer:
        """Each window's prompts on the model's engine (its KV cache charged to the store
        as in a worker); one lane, so the lanes' shares never come into play."""
        from worker.execution.generative.runtime import engine_of  # loads transformers

        name = self.params.model

        def reserve(nbytes: int) -> None:
            self._registry.reserve(name, nbytes)

        engine = engine_of(model, reserve, SchedulingConfig().lane_shares())

        def generated(window: Window, decoded: Decoded, _later: int) -> WindowResult:
            sql = self.params.sql_results
            return generated_window(self.name, window, decoded, model, engine, sql_results=sql)

        return generated

    def _windows(self, record: JobRecord, parts: Parts, scorer: WindowScorer) -> None:
        total = record.rows_total
        for window, decoded in prefetched(self._decoded(record.checkpoint)):
            parts.begin(window.start, len(window))
            end = window.start + len(window)
            # Rows after this window: unknown for a file not counted, then one more window.
            later = len(window) if total is None else max(0, total - end)
            self._commit(parts, window.start, scorer(window, decoded, later))
            parts.end(window.start, len(window))
            self._on_progress(Progress(end, total))

    def _decoded(self, start: int) -> Iterator[tuple[Window, Decoded]]:
        adapter = self._registry.adapter(self.params.model)
        columns = self.params.columns
        for window in windows(
            self.params.input, self.params.window_for(adapter), start=start, columns=columns.names
        ):
            yield window, decode(window, adapter, columns)

    def _commit(self, parts: Parts, start: int, result: WindowResult) -> None:
        parts.write(start, result.table, result.errors)
        step = self._jobs.advance(self.name, start, result.counts)
        self._store.write_columns(
            result.results, result.drift, also=step, generations=result.generations
        )


def open_job(jobs: JobStore, name: str, params: JobParams, *, kind: str) -> JobRecord:
    """The job of that name, created on first use; a rerun must ask for the same thing."""
    record = jobs.get(name)
    if record is None:
        rows = count_rows(params.input)
        return jobs.create(
            name, kind=kind, model=params.model, params=params.stored(), rows_total=rows
        )
    if record.kind != kind or record.params != params.stored():
        raise JobError(
            f"job {name!r} exists with other parameters: {record.kind} {record.params}; "
            "give this run another --job name"
        )
    if record.state == CANCELLED:
        raise JobError(f"job {name!r} was cancelled; give this run another --job name")
    return record


@contextmanager
def _exclusive(folder: Path, name: str) -> Iterator[None]:
    """One process per job: a second one fails at once instead of interleaving parts."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JobError(f"job {name!r} is running in another process") from None
        yield
    finally:
        os.close(fd)
