"""TCP ports: a free one to bind, and a check that a chosen one is free before a command
starts anything that would take it."""

from __future__ import annotations

import errno
import socket


class PortInUse(OSError):
    """Something already listens on the port asked for."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(errno.EADDRINUSE, f"{host}:{port} is already in use")
        self.host = host
        self.port = port


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def refuse_taken(host: str, port: int) -> None:
    """Raise ``PortInUse`` when another socket listens on ``host:port``."""
    with socket.socket() as sock:
        # As servers bind: connections of an earlier listener in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(host, port) from None
            raise
