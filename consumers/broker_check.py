"""Whether a Kafka broker answers at the bootstrap servers, and if not, why, in bounded time.

Kafka clients retry a broker that refuses them (a SASL handshake the broker does not
offer, say) for as long as their own timeouts allow, logging each try; a command line
asks once per server, each within ``timeout_s``, and reports what each one said.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from aiokafka.conn import collect_hosts, create_conn
from aiokafka.errors import KafkaError, UnsupportedSaslMechanismError
from aiokafka.protocol.metadata import MetadataRequest

from consumers.security import KafkaSecurity


class BrokerUnreachable(Exception):
    """No bootstrap server answered as a Kafka broker with these settings."""

    def __init__(self, bootstrap: str, security: KafkaSecurity, reasons: list[str]) -> None:
        self.bootstrap = bootstrap
        self.reasons = reasons
        protocol = security.protocol
        sasl = f", SASL {security.sasl_mechanism}" if security.uses_sasl else ""
        super().__init__(
            f"no Kafka broker answered at {bootstrap} (security protocol {protocol}{sasl}): "
            + "; ".join(reasons)
        )


async def check_broker(
    bootstrap: str, security: KafkaSecurity | None = None, *, timeout_s: float = 10.0
) -> None:
    """Return once one bootstrap server answers a metadata request; else raise
    ``BrokerUnreachable`` with each server's reason."""
    security = security or KafkaSecurity()
    reasons = []
    for host, port, _ in collect_hosts(bootstrap, randomize=False):
        try:
            await asyncio.wait_for(_ask(host, port, security, timeout_s), timeout_s)
            return
        except TimeoutError:
            reasons.append(f"{host}:{port} did not answer within {timeout_s:g}s")
        except (OSError, KafkaError) as exc:
            reasons.append(f"{host}:{port}: {_reason(exc)}")
    raise BrokerUnreachable(bootstrap, security, reasons)


def require_broker(bootstrap: str, security: KafkaSecurity | None = None) -> None:
    """``check_broker`` for blocking code, on a thread of its own: the caller's thread may
    already run an event loop (a test, a notebook)."""
    with ThreadPoolExecutor(1, thread_name_prefix="inferlane-broker-check") as pool:
        pool.submit(asyncio.run, check_broker(bootstrap, security)).result()


async def _ask(host: str, port: int, security: KafkaSecurity, timeout_s: float) -> None:
    conn = await create_conn(
        host, port, request_timeout_ms=int(timeout_s * 1000), **security.aiokafka_kwargs()
    )
    try:
        await conn.send(MetadataRequest([]))
    finally:
        conn.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    if isinstance(exc, UnsupportedSaslMechanismError):
        return "the broker does not offer this SASL mechanism (or no SASL at all)"
    return str(exc) or type(exc).__name__
