"""How every Kafka client the project builds connects: plaintext, TLS, SASL, or both.

One frozen object, read from settings and env (``INFERLANE_KAFKA__SECURITY__*``), turned
into the keyword arguments of each client library: aiokafka (the worker's consumer,
producer and admin client) and kafka-python (``InferlaneClient``). Passwords are
``SecretStr``: they print as ``**********`` in reprs, logs and errors.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from aiokafka.helpers import create_ssl_context
from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaSecurity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: Protocol = "PLAINTEXT"
    sasl_mechanism: Mechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None  # None: the system's trusted CAs
    ssl_certfile: Path | None = None  # client certificate (mutual TLS)
    ssl_keyfile: Path | None = None
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @model_validator(mode="after")
    def _complete(self) -> KafkaSecurity:
        if self.uses_sasl and (self.sasl_username is None or self.sasl_password is None):
            raise ValueError(f"{self.protocol} needs sasl_username and sasl_password")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together (mutual TLS)")
        tls_fields = (self.ssl_cafile, self.ssl_certfile, self.ssl_key_password)
        if not self.uses_tls and any(f is not None for f in tls_fields):
            raise ValueError(f"TLS files are set but the protocol is {self.protocol}")
        return self

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """For AIOKafkaConsumer, AIOKafkaProducer and AIOKafkaAdminClient."""
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            kwargs |= self._sasl_kwargs()
        return kwargs

    def kafka_python_kwargs(self) -> dict[str, Any]:
        """For kafka-python's KafkaProducer and KafkaConsumer."""
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_tls:
            kwargs |= {
                "ssl_cafile": _str(self.ssl_cafile),
                "ssl_certfile": _str(self.ssl_certfile),
                "ssl_keyfile": _str(self.ssl_keyfile),
                "ssl_password": _secret(self.ssl_key_password),
                "ssl_check_hostname": self.ssl_check_hostname,
            }
        if self.uses_sasl:
            kwargs |= self._sasl_kwargs()
        return kwargs

    def ssl_context(self) -> ssl.SSLContext:
        context = create_ssl_context(
            cafile=_str(self.ssl_cafile),
            certfile=_str(self.ssl_certfile),
            keyfile=_str(self.ssl_keyfile),
            password=_secret(self.ssl_key_password),
        )
        context.check_hostname = self.ssl_check_hostname
        return context

    def _sasl_kwargs(self) -> dict[str, Any]:
        return {
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_plain_username": self.sasl_username,
            "sasl_plain_password": _secret(self.sasl_password),
        }


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _secret(value: SecretStr | None) -> str | None:
    return None if value is None else value.get_secret_value()
