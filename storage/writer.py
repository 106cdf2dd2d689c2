"""``ResultStore``: writes results, drift rows and consumed offsets in one transaction."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, Engine, select

from storage.bulk import BulkStatement
from storage.engine import begin_write, make_engine
from storage.errors import classified_errors
from storage.migrate import upgrade
from storage.records import DriftRow, GenerationRow, OffsetRow, ResultRow, RowColumns
from storage.schema import consumer_offsets
from storage.upserts import build_upserts


class ResultStore:
    """The SQL sink.

    ``write`` is blocking: call it from a thread, not from the event loop that
    heartbeats the Kafka group. It raises ``StoreUnavailable`` when a retry of the
    same batch may succeed, and ``RowsRefused`` when a value in it is refused for good.
    """

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self._engine = make_engine(url)
        self._upserts = build_upserts(self._engine.dialect.name)
        dialect = self._engine.dialect
        self._results = BulkStatement.compile(self._upserts.results, dialect)
        self._drift = BulkStatement.compile(self._upserts.drift, dialect)
        self._generations = BulkStatement.compile(self._upserts.generations, dialect)
        # Rows are dataclasses named like the columns: read them in parameter order.
        self._result_values = attrgetter(*self._results.columns)
        self._drift_values = attrgetter(*self._drift.columns)
        self._generation_values = attrgetter(*self._generations.columns)
        if migrate:
            with classified_errors():
                upgrade(self._engine)

    @property
    def engine(self) -> Engine:
        """The engine, for the read helpers in ``storage.queries``."""
        return self._engine

    def write(
        self,
        results: Sequence[ResultRow],
        drift: Sequence[DriftRow],
        offsets: Sequence[OffsetRow],
        also: Callable[[Connection], None] | None = None,
        *,
        generations: Sequence[GenerationRow] = (),
    ) -> None:
        """Upsert everything in one transaction: all of it is durable, or none of it.

        ``also`` runs last in that transaction (a job's checkpoint); if it raises, the
        whole write rolls back.
        """
        self.write_values(self.values(results, drift, offsets, generations), also)

    def write_columns(
        self,
        results: RowColumns,
        drift: RowColumns,
        also: Callable[[Connection], None] | None = None,
        *,
        generations: Sequence[GenerationRow] = (),
    ) -> None:
        """``write`` for rows given as columns (a job's window), in one transaction."""
        # A key repeated within one write: the last row wins, as in ``values``.
        results, drift = results.last_per_key("request_id"), drift.last_per_key("request_id")
        generation_values = self.values([], [], [], generations).generations
        with classified_errors(), begin_write(self._engine) as conn:
            self._results.execute_columns(conn, results)
            self._drift.execute_columns(conn, drift)
            if generation_values:
                self._generations.execute(conn, generation_values)
            if also is not None:
                also(conn)

    def values(
        self,
        results: Sequence[ResultRow],
        drift: Sequence[DriftRow],
        offsets: Sequence[OffsetRow],
        generations: Sequence[GenerationRow] = (),
    ) -> WriteValues:
        """The parameters of one write, as plain tuples: what ``write_values`` takes,
        here or in another process (``storage.write_process``)."""
        # A key repeated within one batch is collapsed first (last row wins; highest
        # offset wins): some drivers send a batch as one multi-row INSERT, and
        # PostgreSQL refuses to update the same row twice in one statement.
        latest = {row.request_id: row for row in results}
        latest_drift = {row.request_id: row for row in drift}
        latest_generations = {row.request_id: row for row in generations}
        return WriteValues(
            list(map(self._result_values, latest.values())),
            list(map(self._drift_values, latest_drift.values())),
            _offset_params(offsets),
            list(map(self._generation_values, latest_generations.values())),
        )

    def write_values(
        self, values: WriteValues, also: Callable[[Connection], None] | None = None
    ) -> None:
        """``write``, from parameters ``values`` built."""
        if not (values or also):
            return
        with classified_errors(), begin_write(self._engine) as conn:
            # One executemany per table; empty parameter lists would run it once, bare.
            if values.results:
                self._results.execute(conn, values.results)
            if values.drift:
                self._drift.execute(conn, values.drift)
            if values.generations:
                self._generations.execute(conn, values.generations)
            if values.offsets:
                conn.execute(self._upserts.offsets, values.offsets)
            if also is not None:
                also(conn)

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """``{(topic, partition): next offset to consume}`` stored for ``group_id``."""
        query = select(
            consumer_offsets.c.topic, consumer_offsets.c.partition, consumer_offsets.c.next_offset
        ).where(consumer_offsets.c.group_id == group_id)
        with classified_errors(), self._engine.connect() as conn:
            return {(topic, partition): offset for topic, partition, offset in conn.execute(query)}

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class WriteValues:
    """One write's parameters: result and drift rows in their statements' column order,
    offsets by column name. Plain values, so they pickle cheaply."""

    results: list[tuple[Any, ...]]
    drift: list[tuple[Any, ...]]
    offsets: list[dict[str, Any]]
    generations: list[tuple[Any, ...]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.results or self.drift or self.offsets or self.generations)


def _offset_params(rows: Sequence[OffsetRow]) -> list[dict[str, Any]]:
    highest: dict[tuple[str, str, int], int] = {}
    for row in rows:
        key = (row.group_id, row.topic, row.partition)
        highest[key] = max(highest.get(key, row.next_offset), row.next_offset)
    updated_at = datetime.now(UTC)
    return [
        {
            "group_id": group_id,
            "topic": topic,
            "partition": partition,
            "next_offset": next_offset,
            "updated_at": updated_at,
        }
        for (group_id, topic, partition), next_offset in highest.items()
    ]
