"""Helpers for the ops tests: free ports, HTTP reads, a TCP proxy that can be cut."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable

import pytest


def get(url: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """Blocking GET: (status, body), error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()


async def aget(url: str) -> tuple[int, bytes]:
    return await asyncio.to_thread(get, url)


async def until(
    condition: Callable[[], Awaitable[bool]], timeout_s: float = 60.0, what: str = ""
) -> None:
    """Poll an async condition until it holds; fail with ``what`` at the timeout."""
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        await asyncio.sleep(0.1)


def require_binary(name: str) -> str:
    """The binary's path; missing: skip locally, fail under CI (it installs them)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (.ci/run installs it)")
        pytest.skip(f"{name} is not installed")
    return path


class CuttableProxy:
    """A TCP proxy on the test's event loop; ``cut()`` drops every connection and
    refuses new ones (accepted, then closed at once) until ``restore()``; ``hang()``
    drops them too, then holds new ones open without an answer (a black hole)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.cut_off = False
        self.hanging = False

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def cut(self) -> None:
        self.cut_off = True
        for w in list(self._writers):
            w.close()
        self._writers.clear()

    def hang(self) -> None:
        self.cut()
        self.cut_off, self.hanging = False, True

    def restore(self) -> None:
        self.cut_off = False
        if self.hanging:  # the held connections fail now, as a timeout would end them
            self.hanging = False
            self.cut()
            self.cut_off = False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.close()
            return
        if self.hanging:
            self._writers.add(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()
