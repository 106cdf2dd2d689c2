"""How blocking work leaves the event loop that heartbeats the Kafka group.

- ``off_loop(fn, *args)``: await one blocking call (SQL, a file, a model load, a render)
  on the loop's default thread pool.
- ``own_thread(name, target, *args)``: a thread of its own, for work that lives as long as
  its owner or must not queue behind other calls (compute threads and their watchdog,
  the NVML and registry-file pollers, the drift tracker, a rollout's comparer).
- ``one_thread_pool(name)``: one thread that takes calls in turn (the model loader, the
  broker probe), so that a slow call never runs twice at once.

Threads are daemons named ``inferlane-<name>``, so a hung one never holds up exit and
every one can be told apart in a dump. Forward passes go through the executor
(``worker.execution``), which runs them on its compute threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar, TypeVarTuple

P = ParamSpec("P")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


async def off_loop(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


def own_thread(name: str, target: Callable[[*Ts], object], *args: *Ts) -> threading.Thread:
    """Started, running ``target(*args)``."""
    thread = threading.Thread(target=target, args=args, name=f"inferlane-{name}", daemon=True)
    thread.start()
    return thread


def one_thread_pool(name: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"inferlane-{name}")
