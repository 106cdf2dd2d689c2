"""Create the topics the worker reads and writes, when they are missing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from consumers.security import KafkaSecurity


async def ensure_topics(
    bootstrap: str,
    names: Iterable[str],
    *,
    partitions: int,
    security: KafkaSecurity | None = None,
) -> list[str]:
    """Create each missing topic with ``partitions`` partitions; return those created."""
    admin = admin_client(bootstrap, security)
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


def admin_client(bootstrap: str, security: KafkaSecurity | None = None) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id="inferlane-admin",
        **(security or KafkaSecurity()).aiokafka_kwargs(),
    )
