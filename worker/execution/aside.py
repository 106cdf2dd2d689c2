"""Work beside the served traffic, on the executor's low lane so that it yields to live
requests like any bulk batch: requests already served, run again on another model (a
rollout's comparisons, drift's reference checks), and offline jobs' windows."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from consumers.contract import Priority
from consumers.errors import ModelTimeout
from worker.base.pending import Batch, BatchRun, Pending

# The executor's ``submit``: a batch in, its ``BatchRun`` out.
Submit = Callable[[Batch], Future[BatchRun]]


def run_aside(submit: Submit, model: str, served: Sequence[Pending]) -> BatchRun:
    """``served`` again on ``model`` (a registry key), with no deadline. Blocking: call
    it off the event loop."""
    items = [dataclasses.replace(p, serving=model, deadline_s=None) for p in served]
    return submit(Batch(model, items, time.monotonic(), lane=Priority.LOW)).result()


def submit_rows(submit: Submit, model: str, rows: Any) -> Future[BatchRun]:
    """A job window's rows (a numeric matrix, or prepared items) through ``model`` (a
    registry key), on the low lane; ``rows_output`` reads what the pass gave."""
    return submit(Batch(model, [], time.monotonic(), lane=Priority.LOW, rows=rows))


def rows_output(run: Future[BatchRun]) -> tuple[Any, float]:
    """A rows pass's raw output and the seconds it computed, once it ends. Raises what
    the forward pass raised, or ``ModelTimeout`` when the watchdog abandoned it."""
    done = run.result()
    if done.output is None:
        raise ModelTimeout("the model ran past its compute timeout on this batch")
    return done.output, done.compute_s
