"""``inferlane results``: what happened to requests, read back from the results and
dead-letter topics, by request id or following the topics."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from consumers.contract import DeadLetterHeaders
from worker.cli.options import Bootstrap

if TYPE_CHECKING:
    from consumers.results_reader import ReadBack

_SHOWN_CHARS = 120  # of outputs and dead-letter values, in text; --json has them whole


def results(
    bootstrap: Bootstrap,
    request_ids: Annotated[
        list[str] | None, typer.Argument(help="Request ids to look up (none: --follow).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Print each record as it arrives, until Ctrl-C.")
    ] = False,
    timeout_s: Annotated[
        float,
        typer.Option("--timeout", min=0, help="Seconds to wait for the ids not yet seen."),
    ] = 10.0,
    json: Annotated[
        bool, typer.Option("--json", help="One JSON object per line, outputs whole.")
    ] = False,
) -> None:
    """Results and dead letters of REQUEST_IDS; with --follow, of those still to come.

    By id, both topics are read from their beginning; exits 1 when an id has neither a
    result nor a dead letter before the timeout."""
    from consumers.broker_check import require_broker
    from consumers.results_reader import ResultsReader
    from worker.settings import WorkerSettings

    if not request_ids and not follow:
        raise typer.BadParameter("give request ids, or --follow", param_hint="REQUEST_IDS")
    settings = WorkerSettings()
    security = settings.kafka.security
    require_broker(bootstrap, security)
    topics = settings.topics
    with ResultsReader(
        bootstrap,
        results_topic=topics.results,
        dead_letter_topic=topics.dead_letters,
        security=security,
    ) as reader:
        if follow:
            # Ctrl-C sets a flag that the reading loop checks between polls, instead of
            # raising wherever the Kafka client happens to be.
            stop = threading.Event()
            previous = signal.signal(signal.SIGINT, lambda _sig, _frame: stop.set())
            try:
                arriving = reader.follow(stop)
                typer.echo(f"following {topics.results} and {topics.dead_letters}", err=True)
                for back in arriving:
                    if not request_ids or back.request_id in request_ids:
                        _show(back, json)
            finally:
                signal.signal(signal.SIGINT, previous)
            return
        lookup = reader.find(request_ids or [], timeout_s=timeout_s)
    for rid in request_ids or []:
        for back in lookup.found.get(rid, []):
            _show(back, json)
    if lookup.missing:
        typer.echo(
            f"not found: {' '.join(lookup.missing)} (read {lookup.records_read:,} records of "
            f"{topics.results} and {topics.dead_letters} in {lookup.seconds:.1f}s)",
            err=True,
        )
        raise typer.Exit(1)


def _show(back: ReadBack, as_json: bool) -> None:
    typer.echo(_json_line(back) if as_json else _text_line(back))


def _json_line(back: ReadBack) -> str:
    where = {"topic": back.topic, "partition": back.partition, "offset": back.offset}
    entry: dict[str, Any]
    if back.result is not None:
        entry = {"kind": "result", **where, **back.result.model_dump(mode="json")}
    else:
        value = back.value.decode("utf-8", "replace")
        entry = {"kind": "dead_letter", **where, "request_id": back.request_id}
        entry |= {"headers": back.headers, "value": value}
    return orjson.dumps(entry).decode()


def _text_line(back: ReadBack) -> str:
    rid = back.request_id or "(no id)"
    r = back.result
    if r is None:
        h, names = back.headers, DeadLetterHeaders
        source = f"{h.get(names.TOPIC)}[{h.get(names.PARTITION)}]@{h.get(names.OFFSET)}"
        return (
            f"{rid}  dead letter  {h.get(names.CODE)}: {h.get(names.MESSAGE)}  from {source}  "
            f"value {_cut(back.value.decode('utf-8', 'replace'))}"
        )
    head = f"{rid}  {r.status.value}  {r.model} {r.model_version or ''}".rstrip()
    timing = f"{r.priority.value} lane, batch {r.batch_size}, {r.latency_ms.total:.1f} ms"
    if r.error is not None:
        return f"{head}  {r.error.code}: {r.error.message}  ({timing})"
    return f"{head}  ({timing})  {_cut(orjson.dumps(r.outputs).decode())}"


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
