"""Records consumed and not yet durable: how many per partition, and their bytes.

Every consumed record is held somewhere (a lane, the executor, the completion queue,
the sink) until its outcome is durable, so this budget bounds the worker's memory
whatever stalls downstream: a database or broker outage fills it, then intake pauses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from consumers.offsets import TopicPartitionKey
from consumers.records import RawRecord


class InFlight:
    def __init__(self, *, max_records: int, max_bytes: int) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._per_partition: Counter[TopicPartitionKey] = Counter()
        self._records = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._records

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def load(self) -> float:
        """The share of the budget in use: the larger of records and bytes."""
        return max(self._records / self.max_records, self._bytes / self.max_bytes)

    def add(self, records: Iterable[RawRecord]) -> None:
        self._move(records, +1)

    def remove(self, records: Iterable[RawRecord]) -> None:
        self._move(records, -1)

    def count_in(self, partitions: set[TopicPartitionKey]) -> int:
        return sum(self._per_partition[tp] for tp in partitions)

    def _move(self, records: Iterable[RawRecord], sign: int) -> None:
        for r in records:
            src = r.source
            self._per_partition[(src.topic, src.partition)] += sign
            self._records += sign
            self._bytes += sign * (len(r.value) if r.value is not None else 0)
