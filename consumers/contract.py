"""Wire contract v1: the request, result and dead-letter shapes users and tools rely on."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator


class Priority(StrEnum):
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class Status(StrEnum):
    OK = "ok"
    ERROR = "error"
    EXPIRED = "expired"
    REJECTED = "rejected"


# What the SQL columns and PostgreSQL text can hold: ids up to 128 characters, names up
# to 255, and no NUL character (PostgreSQL refuses it in text).
NO_NUL = r"^[^\x00]*$"
RequestId = Annotated[str, Field(min_length=1, max_length=128, pattern=NO_NUL)]
ModelName = Annotated[str, Field(min_length=1, max_length=255, pattern=NO_NUL)]
# Kafka's legal topic names.
TopicName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")]

# A JSON value. Not pydantic's JsonValue: requests are parsed by orjson, so they are JSON
# by construction, and re-validating every element cost more than a small model's
# forward pass (profiled on digits).
Json = Any


class InferenceRequest(BaseModel):
    """One request as published to a lane topic (UTF-8 JSON value)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    request_id: RequestId
    model: ModelName
    inputs: Json = Field(repr=False)
    priority: Priority | None = None
    # Strict: JSON true must not become a 1 ms timeout.
    timeout_ms: Annotated[StrictInt, Field(gt=0)] | None = None
    deadline_ms: Annotated[StrictInt, Field(gt=0)] | None = None
    expected: Json = Field(default=None, repr=False)
    reply_to: TopicName | None = None
    metadata: dict[str, Json] | None = None

    @model_validator(mode="after")
    def _inputs_present(self) -> InferenceRequest:
        # A request without inputs is not a request.
        if self.inputs is None:
            raise ValueError("inputs must not be null")
        return self


class ErrorInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    code: str
    message: str


class Latency(BaseModel):
    model_config = ConfigDict(frozen=True)

    queue: float
    compute: float
    total: float


class InferenceResult(BaseModel):
    """One result per request id, keyed by it on the results topic."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    model: str
    model_version: str | None = None
    status: Status
    outputs: Json = Field(default=None, repr=False)
    error: ErrorInfo | None = None
    priority: Priority
    batch_size: int = 0
    latency_ms: Latency
    metadata: dict[str, Json] | None = None


class StreamChunk(BaseModel):
    """A piece of a generative request's text, keyed by its request id on the topic its
    result goes to, before that result. The chunks of a request, in ``seq`` order,
    concatenate to the result's ``outputs.text``; a replayed request sends the same
    chunks again, so a consumer deduplicates by (``request_id``, ``seq``)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["chunk"] = "chunk"  # what tells a chunk from a result on the topic
    request_id: str
    model: str
    seq: int  # 0, 1, 2, ... per request
    text: str
    tokens: int  # tokens generated so far, this chunk's included


class DeadLetterHeaders:
    """Header names on a dead letter; the value bytes are the original, untouched."""

    CODE = "error.code"
    MESSAGE = "error.message"
    TOPIC = "source.topic"
    PARTITION = "source.partition"
    OFFSET = "source.offset"
    # Set (to the original size) when a value was too large to carry back out.
    VALUE_OMITTED = "value.omitted.bytes"
