"""Ops options of ``inferlane run`` and ``demo`` (HTTP port and host, log format) and
``publish-demo``."""

from __future__ import annotations

from typing import Annotated

import typer

from worker.cli.options import Bootstrap, renamed
from worker.ops.logs import LogFormat

HttpPort = Annotated[
    int | None,
    typer.Option(
        help="Port of /metrics, /healthz, /readyz and the status page (default 9400; "
        "0: off). Env INFERLANE_OPS__HTTP_PORT."
    ),
]
HttpHost = Annotated[
    str | None,
    typer.Option(help="Address to bind (default 127.0.0.1). Env INFERLANE_OPS__HTTP_HOST."),
]
# The flag's old name, still accepted: the metrics are now on the one ops port.
MetricsPort = Annotated[
    int | None,
    typer.Option(
        hidden=True,
        callback=renamed("--metrics-port", "--http-port"),
        help="Old name of --http-port.",
    ),
]
LogFormatOption = Annotated[
    LogFormat, typer.Option(help="text, or json: one object per line with request ids and codes.")
]


def publish_demo(
    bootstrap: Bootstrap,
    digits: Annotated[int, typer.Option(help="Number of digits requests.")] = 6000,
    diabetes: Annotated[int, typer.Option(help="Number of diabetes requests.")] = 1000,
    minilm: Annotated[int, typer.Option(help="Number of minilm requests.")] = 600,
) -> None:
    """Publish the demo's labelled workload (and its bad records) to a running cluster."""
    from consumers.broker_check import require_broker
    from worker.demo.load import publish_demo as publish

    require_broker(bootstrap)  # plaintext, as the demo's publisher connects
    sent = publish(bootstrap, digits=digits, diabetes=diabetes, minilm=minilm)
    typer.echo(f"published {sent} demo records")
