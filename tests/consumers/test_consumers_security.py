"""Kafka security settings reach every client the project builds (no broker needed:
each client is constructed and its configuration read back), and secrets stay secret."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from consumers.client import InferlaneClient
from consumers.config import KafkaConfig
from consumers.egress import Egress
from consumers.ingress import Ingress
from consumers.security import KafkaSecurity
from consumers.topics import admin_client
from worker.settings import WorkerSettings

# A self-signed certificate and key made for these tests only (it is its own CA).
TLS = Path(__file__).parent / "tls"
NOWHERE = "127.0.0.1:1"  # nothing listens: constructing a client must not need a broker


def sasl_ssl(mechanism: str = "SCRAM-SHA-512") -> KafkaSecurity:
    return KafkaSecurity.model_validate(
        {
            "protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_username": "alice",
            "sasl_password": "s3cret-pw",
            "ssl_cafile": TLS / "client.pem",
            "ssl_certfile": TLS / "client.pem",
            "ssl_keyfile": TLS / "client.key",
        }
    )


def ingress(security: KafkaSecurity) -> Ingress:
    config = KafkaConfig(group_id="g", client_id="c", fetch_max_records=10, security=security)
    return Ingress(
        NOWHERE,
        config,
        topics=["t", "urgent"],
        urgent_topics={"urgent"},  # read by a second consumer: it must get the settings too
    )


def assert_aiokafka_client(client: object, mechanism: str) -> None:
    assert client._security_protocol == "SASL_SSL"  # type: ignore[attr-defined]
    assert client._sasl_mechanism == mechanism  # type: ignore[attr-defined]
    assert client._sasl_plain_username == "alice"  # type: ignore[attr-defined]
    assert client._sasl_plain_password == "s3cret-pw"  # type: ignore[attr-defined]
    context = client._ssl_context  # type: ignore[attr-defined]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs()[0]["subject"] == ((("commonName", "inferlane-test-only"),),)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_the_worker_consumer_producer_and_admin_get_sasl_and_tls(mechanism: str) -> None:
    security = sasl_ssl(mechanism)
    egress = Egress(
        bootstrap=NOWHERE,
        client_id="c",
        linger_ms=1,
        max_request_bytes=4096,
        security=security,
    )
    consumer, admin = ingress(security), admin_client(NOWHERE, security)
    try:
        assert_aiokafka_client(consumer._consumer._client, mechanism)
        assert consumer._urgent_reader is not None
        assert_aiokafka_client(consumer._urgent_reader._client, mechanism)
        assert_aiokafka_client(egress._producer.client, mechanism)
        assert_aiokafka_client(admin._client, mechanism)
    finally:  # never started: closing releases them without a connection
        await consumer.stop()
        await egress.stop()
        await admin.close()


def test_the_user_client_gets_sasl_and_tls() -> None:
    with InferlaneClient(NOWHERE, security=sasl_ssl(), api_version=(3, 7)) as client:
        config = client._producer.config
    assert config["security_protocol"] == "SASL_SSL"
    assert config["sasl_mechanism"] == "SCRAM-SHA-512"
    assert config["sasl_plain_username"] == "alice"
    assert config["sasl_plain_password"] == "s3cret-pw"
    assert config["ssl_cafile"] == str(TLS / "client.pem")
    assert config["ssl_certfile"] == str(TLS / "client.pem")
    assert config["ssl_keyfile"] == str(TLS / "client.key")


async def test_plaintext_is_the_default_and_sends_no_credentials() -> None:
    consumer = ingress(KafkaSecurity())
    client = consumer._consumer._client
    await consumer.stop()
    assert client._security_protocol == "PLAINTEXT"
    assert client._ssl_context is None and client._sasl_plain_password is None


def test_settings_and_env_reach_the_worker_and_passwords_never_print(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERLANE_KAFKA__SECURITY__PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("INFERLANE_KAFKA__SECURITY__SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("INFERLANE_KAFKA__SECURITY__SASL_USERNAME", "bob")
    monkeypatch.setenv("INFERLANE_KAFKA__SECURITY__SASL_PASSWORD", "hunter2-pw")
    settings = WorkerSettings()
    security = settings.kafka.security
    assert security.protocol == "SASL_PLAINTEXT"
    assert security.sasl_password == SecretStr("hunter2-pw")
    assert security.aiokafka_kwargs()["sasl_plain_password"] == "hunter2-pw"
    assert "ssl_context" not in security.aiokafka_kwargs()
    for shown in (repr(settings), str(settings), settings.model_dump_json()):
        assert "hunter2-pw" not in shown


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"protocol": "SASL_SSL", "sasl_username": "a"}, "sasl_username and sasl_password"),
        ({"protocol": "SSL", "ssl_certfile": "c.pem"}, "go together"),
        ({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"}, "sasl_mechanism"),
        ({"protocol": "PLAINTEXT", "ssl_cafile": "ca.pem"}, "protocol is PLAINTEXT"),
        ({"protocol": "TLS"}, "protocol"),
    ],
)
def test_incomplete_or_unknown_settings_are_refused(
    fields: dict[str, object], complaint: str
) -> None:
    with pytest.raises(ValidationError, match=complaint):
        KafkaSecurity.model_validate(fields)
