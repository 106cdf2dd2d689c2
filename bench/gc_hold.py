"""A block of benchmark work without full garbage-collector passes."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from worker.execution.gc_schedule import hold_full_passes, release_full_passes


@contextlib.contextmanager
def without_full_passes() -> Iterator[None]:
    """Freeze what exists now; no full pass runs unless asked for, until the block ends."""
    gc.collect()
    gc.freeze()
    hold_full_passes()
    try:
        yield
    finally:
        release_full_passes()
