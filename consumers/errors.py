"""Error taxonomy shared by every stage: a stable code and a retriable flag.

A request-level failure is carried as a value (``ErrorInfo`` on the wire) so that one
bad request never fails its neighbours; these exceptions are how stages raise them.
"""

from __future__ import annotations

from typing import ClassVar


class InferlaneError(Exception):
    """Base error: ``code`` is stable (it lands in dead-letter headers and SQL)."""

    code: ClassVar[str] = "internal"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRecord(InferlaneError):
    """The record's bytes are not a valid request (JSON, UTF-8, schema)."""

    code = "bad_record"


class PayloadTooLarge(InferlaneError):
    code = "payload_too_large"


class UnknownModel(InferlaneError):
    code = "unknown_model"


class BadInput(InferlaneError):
    """The request is well formed but its inputs do not fit the model (shape, type, NaN)."""

    code = "bad_input"


class BadLabel(BadInput):
    """``expected`` cannot be a label of this model (a class it does not have, not a
    number), or a label on the labels topic is malformed or names no usable result."""

    code = "bad_label"


class ModelFailed(InferlaneError):
    """The model raised while running this request alone (poison input)."""

    code = "model_error"


class ModelUnavailable(InferlaneError):
    """The model cannot be loaded now (bad files, failing adapter); retried in the background."""

    code = "model_unavailable"


class NonFiniteOutput(InferlaneError):
    """The model returned NaN or Infinity for this request."""

    code = "non_finite_output"


class ReplyToNotAllowed(InferlaneError):
    """``reply_to`` names a topic outside the configured allow-list."""

    code = "reply_to_not_allowed"


class ReplyToRefused(InferlaneError):
    """The broker refused the result on the request's ``reply_to`` topic for good."""

    code = "reply_to_refused"


class ResultTooLarge(InferlaneError):
    """The result is larger than a Kafka record may be; its Kafka copy drops its payload."""

    code = "result_too_large"


class Expired(InferlaneError):
    code = "expired"


class ModelTimeout(InferlaneError):
    """The batch holding this request ran past its model's compute timeout (a hung model)."""

    code = "model_timeout"
