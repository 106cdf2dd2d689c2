"""The Kafka clients' settings (``WorkerSettings.kafka``): one section, taken whole by
intake and output."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from consumers.security import KafkaSecurity


class KafkaConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    group_id: str = "inferlane"
    client_id: str = "inferlane-worker"
    # Records one fetch hands over: the event loop turns each into a record object in
    # one go, so this bounds how long a bulk fetch holds the loop (and a high record).
    fetch_max_records: int = Field(default=500, ge=1)
    # The group's offsets go to Kafka at most this often, the newest durable ones each
    # time (SQL holds them for restarts; Kafka's copy is for the group's tools).
    commit_interval_ms: int = Field(default=200, ge=1)
    max_message_bytes: int = Field(default=1_048_576, ge=1024)  # larger requests: rejected
    # Tansu holds a join for about half of this: short keeps startup and rebalances quick.
    session_timeout_ms: int = Field(default=10_000, ge=6_000)
    linger_ms: int = 2
    # How long to wait for an unknown topic (a reply_to) before refusing its records.
    metadata_timeout_ms: int = Field(default=10_000, ge=100)
    security: KafkaSecurity = KafkaSecurity()  # TLS and SASL, for every client

    @property
    def max_request_bytes(self) -> int:
        """Produce requests carry a whole rejected record back out, with headers."""
        return 2 * self.max_message_bytes + 65_536
