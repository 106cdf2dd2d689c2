"""The interpreter's thread switch interval, held short while urgent records are in the worker.

A thread that wants the GIL waits up to ``sys.getswitchinterval()`` (5 ms by default)
before the holder is asked to drop it. A high request crosses threads several times
(the event loop, the compute thread, back), and every torch call in its forward pass
lets the GIL go and takes it back: beside a bulk backlog, each take could wait a whole
interval behind a bulk thread, and a one-item digits pass took 40-70 ms at p99
(docs/SCHEDULING.md, "The event loop and the GIL"). The interval is the process's, so
one count is kept for every worker in it: short while any worker holds urgent records,
back to what it was when none does.
"""

from __future__ import annotations

import sys
import threading

_lock = threading.Lock()
_holders = 0  # workers in this process with urgent records in flight
_saved = 0.0  # the interval before the first holder shortened it


class SwitchInterval:
    """One worker's urgent records between receipt and publication. ``short_s`` None:
    the interval is never changed."""

    def __init__(self, short_s: float | None) -> None:
        self._short_s = short_s
        self._held = 0

    @property
    def held(self) -> int:
        return self._held

    def enter(self, n: int) -> None:
        if self._short_s is None or n <= 0:
            return
        if self._held == 0:
            _hold(self._short_s)
        self._held += n

    def leave(self, n: int) -> None:
        """``n`` urgent records published or handed back. More than are held (a record
        of an urgent topic that reached the worker another way) ends the hold: an
        interval put back early costs latency, never a request."""
        if self._held == 0 or n <= 0:
            return
        self._held -= min(n, self._held)
        if self._held == 0:
            _release()

    def close(self) -> None:
        """Let go of whatever is still held (a stop that did not drain)."""
        self.leave(self._held)


def _hold(short_s: float) -> None:
    global _holders, _saved
    with _lock:
        if _holders == 0:
            _saved = sys.getswitchinterval()
            sys.setswitchinterval(min(short_s, _saved))
        _holders += 1


def _release() -> None:
    global _holders
    with _lock:
        _holders -= 1
        if _holders == 0:
            sys.setswitchinterval(_saved)
