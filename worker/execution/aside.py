"""Work beside the served traffic (a rollout's comparisons, drift's reference checks):
requests already served, run again on another model, on the executor's low lane, so
that this compute yields to live requests like any bulk batch."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from consumers.contract import Priority
from worker.base.pending import Batch, BatchRun, Pending

# The executor's ``submit``: a batch in, its ``BatchRun`` out.
Submit = Callable[[Batch], Future[BatchRun]]


def run_aside(submit: Submit, model: str, served: Sequence[Pending]) -> BatchRun:
    """``served`` again on ``model`` (a registry key), with no deadline. Blocking: call
    it off the event loop."""
    items = [dataclasses.replace(p, serving=model, deadline_s=None) for p in served]
    return submit(Batch(model, items, time.monotonic(), lane=Priority.LOW)).result()
