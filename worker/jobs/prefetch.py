"""Windows read and decoded on a thread of their own while the caller scores and writes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from worker.base.blocking import own_thread
from worker.jobs.decode import Decoded
from worker.jobs.sources import Window

# Windows read and decoded ahead of the one being scored.
PREFETCH = 2


def prefetched(items: Iterator[tuple[Window, Decoded]]) -> Iterator[tuple[Window, Decoded]]:
    """Read and decode on a thread of its own while the caller scores and writes."""
    ahead: queue.Queue[tuple[Window, Decoded] | BaseException | None] = queue.Queue(PREFETCH)
    stop = threading.Event()

    def fill() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                ahead.put(item)
            ahead.put(None)
        except BaseException as exc:  # handed to the caller, raised there
            ahead.put(exc)

    thread = own_thread("job-reader", fill)
    try:
        while (item := ahead.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                ahead.get_nowait()
            except queue.Empty:
                thread.join(0.05)
