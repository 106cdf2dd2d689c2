"""How far the workers are: SQL rows over time, polled on a thread."""

from __future__ import annotations

import itertools
import threading
import time

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from storage import count_results

_POLL_S = 0.2


class Progress:
    """``samples``: (monotonic s when asked, rows in ``inference_results``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-progress", daemon=True)

    def start(self) -> Progress:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def count(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def recovery_s(self, fault_ended_s: float) -> float | None:
        """Seconds from the end of a fault until the row count next grew (None: it did
        not grow afterwards, or there was nothing left to do)."""
        after = [(t, n) for t, n in self.samples if t >= fault_ended_s]
        if not after:
            return None
        base = after[0][1]  # the first count read wholly after the fault ended
        for t, n in after:
            if n > base:
                return t - fault_ended_s
        return None

    def longest_stall_s(self, since_s: float) -> float:
        """The longest time after ``since_s`` that the count stood still before its last
        growth (a hung model stalls the compute thread until its timeout)."""
        grew = [since_s]
        last = None
        for t, n in self.samples:
            if t >= since_s and last is not None and n > last:
                grew.append(t)
            last = n
        return max((b - a for a, b in itertools.pairwise(grew)), default=0.0)

    def wait_for(self, rows: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.count < rows and time.monotonic() < deadline:
            self._stop.wait(_POLL_S)
        return self.count >= rows

    def wait_growth(self, since_s: float, timeout_s: float) -> bool:
        """Until the count grows past what it was at ``since_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.recovery_s(since_s) is not None:
                return True
            self._stop.wait(_POLL_S)
        return False

    def ids(self, prefix: str) -> set[str]:
        query = text("SELECT request_id FROM inference_results WHERE request_id LIKE :p")
        try:
            with self._engine.connect() as conn:
                return {r[0] for r in conn.execute(query, {"p": prefix + "%"})}
        except SQLAlchemyError:  # before the worker has created its tables
            return set()

    def error_code(self, request_id: str) -> str | None:
        with self._engine.connect() as conn:
            return conn.execute(
                text("SELECT error_code FROM inference_results WHERE request_id = :r"),
                {"r": request_id},
            ).scalar_one_or_none()

    def sql_duplicates(self) -> int:
        """Rows beyond one per request id, results and drift log together."""
        extra = 0
        with self._engine.connect() as conn:
            for table in ("inference_results", "inference_log"):
                extra += conn.execute(
                    text(f"SELECT COUNT(*) - COUNT(DISTINCT request_id) FROM {table}")
                ).scalar_one()
        return int(extra)

    def sources(self) -> set[tuple[int, int]]:
        """(partition, offset) of every request-topic record with a result row."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                text("SELECT source_partition, source_offset FROM inference_results")
            )
            return {(int(p), int(o)) for p, o in rows}

    def _loop(self) -> None:
        while not self._stop.is_set():
            asked_s = time.monotonic()  # the count holds at least what was durable then
            try:
                n = count_results(self._engine)
            except SQLAlchemyError:  # before the worker has created its tables
                n = 0
            self.samples.append((asked_s, n))
            self._stop.wait(_POLL_S)
