"""``WriterProcess``: ``ResultStore.write`` run in a process of its own.

A writer thread in the worker's process binds every row under the interpreter lock the
event loop also holds: under load it spends most of its time waiting for that lock, and
the results' write sets how fast a backlog drains (docs/BENCHMARKS.md). Here the caller
only turns rows into plain tuples and hands them over a pipe; binding, JSON encoding and
the driver's work run in a child process with an interpreter of its own.

Same contract as ``ResultStore.write``: one transaction per call, ``StoreUnavailable``
when a retry may succeed, ``RowsRefused`` when a value is refused for good. A child that
dies is a transient failure: the call raises ``StoreUnavailable`` and the next call
starts a fresh child (the write is an upsert, so replaying one that did commit is safe).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from types import TracebackType

from storage.engine import in_memory_sqlite
from storage.errors import RowsRefused, StoreUnavailable
from storage.records import DriftRow, GenerationRow, OffsetRow, ResultRow
from storage.writer import ResultStore, WriteValues

log = logging.getLogger(__name__)

# What the child answers per write: ("ok", ""), or which error and its message.
_OK, _REFUSED, _UNAVAILABLE, _BUG = "ok", "refused", "unavailable", "bug"


class WriterProcess:
    """Writes through ``store``'s statements, executed by a child process on the same
    database. The child is a spawned interpreter (never a fork of a process running
    threads) that runs ``nice`` steps below its parent's CPU priority: results are on
    Kafka before they are written here, so the write can wait for the cores while the
    event loop and the high lane need them. ``start`` starts it and waits until it is
    ready; a write starts it too, if it is not running."""

    def __init__(self, store: ResultStore, url: str, *, nice: int = 0) -> None:
        if in_memory_sqlite(url):
            raise ValueError("an in-memory SQLite database cannot be written by another process")
        self._store = store  # turns rows into parameters; its dialect is the child's
        self._url = url
        self._nice = nice
        self._lock = threading.Lock()  # one write at a time on the pipe
        self._child: tuple[multiprocessing.process.BaseProcess, Connection] | None = None

    def write(
        self,
        results: Sequence[ResultRow],
        drift: Sequence[DriftRow],
        offsets: Sequence[OffsetRow],
        *,
        generations: Sequence[GenerationRow] = (),
    ) -> None:
        values = self._store.values(results, drift, offsets, generations)
        if not values:
            return
        with self._lock:
            answer = self._exchange(values)
        status, message = answer
        if status == _REFUSED:
            raise RowsRefused(message)
        if status == _UNAVAILABLE:
            raise StoreUnavailable(message)
        if status == _BUG:
            raise RuntimeError(f"the SQL writer process failed:\n{message}")

    @property
    def pid(self) -> int | None:
        """The child's process id; None while none runs."""
        return None if self._child is None else self._child[0].pid

    def start(self) -> None:
        with self._lock:
            self._running()

    def _exchange(self, values: WriteValues) -> tuple[str, str]:
        _, pipe = self._running()
        try:
            pipe.send(values)
            answer: tuple[str, str] = pipe.recv()
            return answer
        except (EOFError, OSError) as exc:
            raise self._ended() from exc

    def _running(self) -> tuple[multiprocessing.process.BaseProcess, Connection]:
        if self._child is not None:
            return self._child
        spawn = multiprocessing.get_context("spawn")
        ours, theirs = spawn.Pipe()
        process = spawn.Process(
            target=_serve,
            args=(theirs, self._url, self._nice),
            name="inferlane-sql-writer",
            daemon=True,
        )
        process.start()
        theirs.close()
        self._child = process, ours
        try:
            ours.recv()  # ready: imports done, engine made
        except EOFError as exc:
            raise self._ended() from exc
        return self._child

    def _ended(self) -> StoreUnavailable:
        process = None if self._child is None else self._child[0]
        self._stop()  # joins it
        code = None if process is None else process.exitcode
        return StoreUnavailable(f"the SQL writer process ended (exit code {code})")

    def _stop(self) -> None:
        if self._child is None:
            return
        process, pipe = self._child
        self._child = None
        with contextlib.suppress(OSError):
            pipe.send(None)  # the child ends once it has answered what it took
        pipe.close()
        process.join(5.0)
        if process.is_alive():
            log.warning("the SQL writer process did not end; killing it")
            process.kill()
            process.join()

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __enter__(self) -> WriterProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _serve(pipe: Connection, url: str, nice: int) -> None:
    """The child: execute each write it is sent, answer how it went; end at None or EOF."""
    os.nice(nice)
    with ResultStore(url, migrate=False) as store:
        pipe.send(None)
        while True:
            try:
                values = pipe.recv()
            except EOFError:
                return
            if values is None:
                return
            pipe.send(_execute(store, values))


def _execute(store: ResultStore, values: WriteValues) -> tuple[str, str]:
    try:
        store.write_values(values)
    except RowsRefused as exc:
        return _REFUSED, exc.reason
    except StoreUnavailable as exc:
        return _UNAVAILABLE, str(exc)
    except Exception:  # a bug (bad SQL, a missing table): the caller raises it
        return _BUG, traceback.format_exc()
    return _OK, ""
