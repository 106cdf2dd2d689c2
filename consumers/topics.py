"""Create the topics the worker reads and writes, when they are missing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError


async def ensure_topics(bootstrap: str, names: Iterable[str], *, partitions: int) -> list[str]:
    """Create each missing topic with ``partitions`` partitions; return those created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="inferlane-admin")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = sorted(set(names) - existing)
        if missing:
            # Another worker of the group may win the race; the topic is there either way.
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(
                    [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in missing]
                )
        return missing
    finally:
        await admin.close()
