"""The worker's HTTP surface on its own event loop: /metrics, /healthz, /readyz, /.

A minimal HTTP/1.1 server (GET only, one request per connection): rendering the
metrics, the status data and the models' places runs in a thread, so a scrape never
stalls the pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from worker.base.blocking import off_loop
from worker.models.listing import model_rows
from worker.ops.metrics import ErrorNote, WorkerMetrics
from worker.ops.page import PAGE
from worker.ops.readiness import Readiness, ReadinessProbe
from worker.ops.registry_read import Snapshot
from worker.ops.sampler import LiveGauges
from worker.ops.status import StatusBoard
from worker.ops.view import WorkerView
from worker.settings import OpsConfig

log = logging.getLogger(__name__)

_JSON = "application/json"
_MAX_HEADER_BYTES = 16_384
_READ_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class OpsServer:
    """``await start()`` binds ``config.http_host:http_port`` (0: does nothing)."""

    def __init__(self, view: WorkerView, metrics: WorkerMetrics, config: OpsConfig) -> None:
        self._view = view
        self._metrics = metrics
        self._config = config
        self._probe = ReadinessProbe(view, config)
        self._gauges = LiveGauges(metrics.registry, view)
        self._board = StatusBoard()
        self._board_lock = asyncio.Lock()
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int | None:
        """The bound port; None when not serving."""
        if self._server is None or not self._server.sockets:
            return None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        c = self._config
        if c.http_port == 0:
            return
        try:
            self._server = await asyncio.start_server(self._serve, c.http_host, c.http_port)
        except OSError as exc:  # the pipeline matters more than its dashboard
            log.error("ops HTTP not served on %s:%d: %s", c.http_host, c.http_port, exc)
            return
        log.info("ops HTTP on http://%s:%d/ (/metrics /healthz /readyz)", c.http_host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self._probe.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            if len(head) > _MAX_HEADER_BYTES:
                return
            method, target = _request_line(head)
            response = await self.respond(method, target)
            reason = _REASONS.get(response.status, "")
            writer.write(
                f"HTTP/1.1 {response.status} {reason}\r\nContent-Type: {response.content_type}"
                f"\r\nContent-Length: {len(response.body)}\r\nCache-Control: no-store\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                writer.write(response.body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # a client that went away or sent garbage: nothing to answer
        except Exception:
            log.exception("ops HTTP request failed")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def respond(self, method: str, target: str) -> Response:
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return Response(405, b"GET only\n")
        if path == "/healthz":
            # Answering at all proves the loop runs; the body says so in JSON.
            return Response(200, b'{"alive":true}', _JSON)
        if path == "/readyz":
            readiness = await self._probe.check()
            return Response(200 if readiness.ready else 503, orjson.dumps(readiness.body()), _JSON)
        if path == "/metrics":
            await self._gauges.refresh(await self._probe.check())
            body = await off_loop(generate_latest, self._metrics.registry)
            return Response(200, body, CONTENT_TYPE_LATEST)
        if path == "/status.json":
            return Response(200, await self._status(), _JSON)
        if path == "/models.json":  # read by `inferlane models list --url`
            rows = await off_loop(model_rows, self._view.registry)
            return Response(200, orjson.dumps({"models": rows}), _JSON)
        if path in ("/", "/index.html"):
            return Response(200, PAGE.encode(), "text/html; charset=utf-8")
        return Response(
            404, b"not found: try /, /metrics, /healthz, /readyz, /status.json, /models.json\n"
        )

    async def _status(self) -> bytes:
        readiness = await self._probe.check()
        await self._gauges.refresh(readiness)
        errors = list(self._metrics.recent_errors)
        async with self._board_lock:  # the board keeps the previous read: one at a time
            return await off_loop(self._render_status, readiness, errors)

    def _render_status(self, readiness: Readiness, errors: list[ErrorNote]) -> bytes:
        snapshot = Snapshot.of(self._metrics.registry)
        return orjson.dumps(self._board.build(snapshot, readiness, errors))


def _request_line(head: bytes) -> tuple[str, str]:
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3:
        return "", ""
    return parts[0], parts[1]
