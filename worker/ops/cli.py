"""``inferlane run`` options of the ops surface: HTTP port and host, log format."""

from __future__ import annotations

from typing import Annotated

import typer

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
MetricsPort = Annotated[int | None, typer.Option(hidden=True, help="Old name of --http-port.")]
LogFormatOption = Annotated[
    LogFormat, typer.Option(help="text, or json: one object per line with request ids and codes.")
]
