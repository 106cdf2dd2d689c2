"""What goes to Kafka for each outcome, and the smaller form a refused record takes.

The broker may refuse a record for good: a ``reply_to`` topic that does not exist or
may not be written, a value over its size limit. Retrying such a record would block
every result behind it, so each refusal is answered with a smaller record instead:

- a result on a ``reply_to`` topic becomes an error result on the results topic,
  plus a dead letter of the request (the SQL row records the error too);
- a result on the results topic keeps its id and status, without outputs and
  metadata, with an error that says why;
- a dead letter keeps its headers, without the original value.

A record whose smaller form is refused as well has no smaller form left.
"""

from __future__ import annotations

from collections.abc import Sequence

from consumers.contract import DeadLetterHeaders, ErrorInfo, InferenceResult, Status
from consumers.egress import OutRecord, Refused
from consumers.errors import ReplyToRefused, ResultTooLarge
from consumers.records import DeadLetter
from worker.base.pending import Outcome


class Refusals:
    def __init__(self, *, results_topic: str, dead_letter_topic: str, max_value_bytes: int) -> None:
        self._results_topic = results_topic
        self._dlq_topic = dead_letter_topic
        self._max_value_bytes = max_value_bytes

    def records(self, outcomes: Sequence[Outcome]) -> list[tuple[OutRecord, Outcome]]:
        """Each outcome's dead letter and result, as Kafka records, with their outcome."""
        out = []
        for o in outcomes:
            if o.dead_letter is not None:
                out.append((self.dead_letter(o.dead_letter), o))
            if o.result is not None:
                out.append((self._result(o.result, o.reply_to), o))
        return out

    def dead_letter(self, d: DeadLetter) -> OutRecord:
        headers = d.headers()
        value = d.value
        # Bytes past what any produce request may carry would be refused anyway; the
        # headers still say where the original lies (topic, partition, offset).
        if value is not None and len(value) > 2 * self._max_value_bytes:
            headers.append((DeadLetterHeaders.VALUE_OMITTED, str(len(value)).encode()))
            value = None
        return OutRecord(self._dlq_topic, d.key, value, headers)

    def _result(self, result: InferenceResult, reply_to: str | None) -> OutRecord:
        value = result.model_dump_json().encode()
        if len(value) > self._max_value_bytes:
            why = (
                f"the result is {len(value)} bytes, over the {self._max_value_bytes}-byte "
                "limit: outputs and metadata are left out here (SQL keeps the outputs)"
            )
            value = _stripped(result, ErrorInfo(code=ResultTooLarge.code, message=why))
        return OutRecord(reply_to or self._results_topic, result.request_id.encode(), value)

    def fallback(self, refusal: Refused, outcome: Outcome) -> list[OutRecord] | None:
        """The records to send instead of ``refusal.record``; None when none is left."""
        record, reason = refusal.record, refusal.reason
        if record.topic == self._dlq_topic:
            if record.value is None:
                return None
            size = str(len(record.value)).encode()
            headers = [*(record.headers or []), (DeadLetterHeaders.VALUE_OMITTED, size)]
            return [OutRecord(record.topic, record.key, None, headers)]
        result = outcome.result
        if result is None:
            return None
        if record.topic != self._results_topic:
            return self._reply_to_refused(outcome, result, f"{record.topic}: {reason}")
        if result.outputs is None and result.metadata is None:
            return None
        error = ErrorInfo(code=ResultTooLarge.code, message=f"the broker refused it: {reason}")
        return [OutRecord(record.topic, record.key, _stripped(result, error))]

    def _reply_to_refused(
        self, outcome: Outcome, result: InferenceResult, reason: str
    ) -> list[OutRecord]:
        error = ReplyToRefused(f"the broker refused the result on reply_to {reason}")
        outcome.result = result.model_copy(
            update={
                "status": Status.ERROR,
                "outputs": None,
                "error": ErrorInfo(code=error.code, message=error.message),
            }
        )
        outcome.reply_to = None
        letter = DeadLetter.of(outcome.record, error)
        outcome.dead_letter = outcome.dead_letter or letter
        return [self._result(outcome.result, None), self.dead_letter(letter)]


def _stripped(result: InferenceResult, error: ErrorInfo) -> bytes:
    return (
        result.model_copy(update={"outputs": None, "metadata": None, "error": error})
        .model_dump_json()
        .encode()
    )
