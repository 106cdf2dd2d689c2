"""A thread's own torch intra-op thread count.

OpenMP thread counts are per thread: a compute thread (a lane's, or a generative
engine's) sets its own without changing what the rest of the process uses.
"""

from __future__ import annotations

import threading

import torch

from worker.base.blocking import own_thread

_lock = threading.Lock()


def set_torch_threads(n: int) -> None:
    """This thread's torch intra-op threads. ``torch.set_num_threads`` also sets the
    count that threads first using torch later start from: a passing thread puts the
    process's count back (its own count dies with it)."""
    with _lock:
        default = torch.get_num_threads()  # also fixes this thread's count, before the set
        if n == default:
            return
        torch.set_num_threads(n)
        own_thread("torch-threads", torch.set_num_threads, default).join()
