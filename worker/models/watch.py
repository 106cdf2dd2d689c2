"""Watch the registry file: call back when its modification time or size changes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from worker.base.blocking import own_thread

log = logging.getLogger(__name__)


class FileWatcher:
    """Polls ``path`` every ``interval_s`` on a daemon thread; ``stop`` ends it."""

    def __init__(self, path: Path, interval_s: float, on_change: Callable[[], None]) -> None:
        self._path = path
        self._interval_s = interval_s
        self._on_change = on_change
        self._stopped = threading.Event()
        self._seen = self._stamp()
        self._thread = own_thread("registry-watch", self._loop)

    def _stamp(self) -> tuple[int, int] | None:
        try:
            stat = self._path.stat()
        except OSError:
            return None  # mid-replace, or removed: the last good registry keeps serving
        return stat.st_mtime_ns, stat.st_size

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval_s):
            stamp = self._stamp()
            if stamp is None or stamp == self._seen:
                continue
            self._seen = stamp
            try:
                self._on_change()
            except Exception:  # the callback reports its own errors; keep watching
                log.exception("registry reload failed")

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
