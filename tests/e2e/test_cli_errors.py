"""Mistakes a new user makes end in one or two lines that name the bad value and the fix:
exit code 2 for a usage error, 1 for a runtime one, no traceback, nothing left behind.

Each case runs the command as a user does, in a folder of its own, with no ``INFERLANE_*``
variables but the model cache (and the case's own).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import make_url

from worker.base.ports import free_port
from worker.intake.broker import EmbeddedBroker

REGISTRY = """\
[[models]]
name = "digits"
version = "1"
{format_line}
path = "{path}"
adapter = {{ kind = "classifier", features = 64, num_classes = 10 }}
"""


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


@dataclass
class User:
    """Runs ``inferlane`` in ``folder`` with ``env``."""

    folder: Path
    env: dict[str, str]

    def run(self, *args: str, timeout_s: float = 120, **env: str) -> Ran:
        done = subprocess.run(
            [sys.executable, "-m", "worker", *args],
            cwd=self.folder,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    def files(self) -> set[str]:
        return {p.name for p in self.folder.iterdir()}


@pytest.fixture
def user(tmp_path: Path, demo_registry_path: Path) -> User:
    folder = tmp_path / "work"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLANE_")}
    env["INFERLANE_MODEL_CACHE"] = str(demo_registry_path.parent)
    return User(folder, env)


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def fails(ran: Ran, code: int, *phrases: str) -> None:
    """Exit ``code``; stderr is one or two lines that hold every phrase; no traceback."""
    assert ran.code == code, (ran.code, ran.out, ran.err)
    lines = ran.err.strip().splitlines()
    assert 1 <= len(lines) <= 2, ran.err
    text = " ".join(ran.err.split())
    for phrase in phrases:
        assert phrase in text, (phrase, ran.err)
    assert "Traceback" not in ran.out + ran.err and "Logging error" not in ran.err


# -- usage errors (exit 2) -------------------------------------------------------------


def test_a_file_name_given_as_the_database(user: User) -> None:
    ran = user.run("anomalies", "--database", "x.db")
    fails(ran, 2, "--database", "not a database URL: 'x.db'", "sqlite:///x.db")
    assert user.files() == set()


def test_an_unknown_kind_of_database(user: User) -> None:
    ran = user.run("run", "--database", "mysq://db/x", "--http-port", "0")
    fails(ran, 2, "unknown kind of database 'mysq'", "postgresql://user@host/db")
    assert user.files() == set()


def test_since_that_is_neither_a_span_nor_a_time(user: User) -> None:
    fails(user.run("anomalies", "--since", "bogus"), 2, "'bogus'", "1d", "2026-12-06T10:00")
    assert user.files() == set()


def test_score_with_a_model_the_registry_lacks(user: User) -> None:
    (user.folder / "rows.csv").write_text("a\n1\n")
    ran = user.run("score", "--model", "digitz", "--input", "rows.csv", "--input-column", "a",
                   "--output", "out.jsonl")  # fmt: skip
    fails(ran, 2, "--model 'digitz'", "diabetes, digits, minilm")
    assert user.files() == {"rows.csv"}  # no database, no output


def test_score_on_a_csv_without_the_inputs_column(user: User) -> None:
    (user.folder / "rows.csv").write_text("a,b\n1,2\n")
    ran = user.run("score", "--model", "digits", "--input", "rows.csv", "--output", "out.jsonl")
    fails(ran, 2, "rows.csv: no column inputs", "--input-column")
    assert user.files() == {"rows.csv"}


def test_score_refuses_a_fifo_at_once(user: User) -> None:
    os.mkfifo(user.folder / "rows.jsonl")  # nothing ever writes: reading it would hang
    ran = user.run("score", "--model", "digits", "--input", "rows.jsonl", "--output", "o.jsonl",
                   timeout_s=60)  # fmt: skip
    fails(ran, 2, "rows.jsonl is not a regular file")
    assert user.files() == {"rows.jsonl"}


def test_a_registry_with_a_typo(user: User) -> None:
    registry = user.folder / "registry.toml"
    registry.write_text(REGISTRY.format(format_line='fromat = "export"', path="digits.pt2"))
    ran = user.run("run", "--models", "registry.toml", "--database", "sqlite:///x.db")
    fails(ran, 2, "model registry registry.toml", "models[0].fromat: unknown field (a typo?)")
    assert user.files() == {"registry.toml"}


def test_a_registry_naming_a_missing_weights_file(user: User) -> None:
    registry = user.folder / "registry.toml"
    registry.write_text(REGISTRY.format(format_line='format = "export"', path="gone.pt2"))
    ran = user.run("run", "--models", "registry.toml", "--database", "sqlite:///x.db")
    fails(ran, 2, f"digits version 1 names {user.folder / 'gone.pt2'}, which does not exist")
    assert user.files() == {"registry.toml"}


def test_an_unknown_setting_in_the_environment(user: User) -> None:
    ran = user.run("anomalies", INFERLANE_BATCHNG__MAX_BATCH="3")
    fails(ran, 2, "INFERLANE_BATCHNG__MAX_BATCH", "did you mean INFERLANE_BATCHING__MAX_BATCH?")
    assert user.files() == set()


def test_a_setting_with_a_bad_value(user: User) -> None:
    ran = user.run("anomalies", INFERLANE_BATCHING__MAX_BATCH="many")
    fails(ran, 2, "batching.max_batch='many' (INFERLANE_BATCHING__MAX_BATCH)", "valid integer")
    assert user.files() == set()


# -- runtime errors (exit 1) -----------------------------------------------------------


def test_a_postgresql_database_that_does_not_exist(user: User, pg_database: str) -> None:
    missing = make_url(pg_database).set(database=f"nosuch_{uuid.uuid4().hex[:8]}")
    url = missing.render_as_string(hide_password=False)
    ran = user.run("run", "--database", url, "--http-port", "0")
    fails(ran, 1, f'database "{missing.database}" does not exist', "--database")
    assert user.files() == set()


def test_a_postgresql_url_without_its_driver(user: User) -> None:
    # A psycopg that cannot be imported, first on the path: as if it were not installed.
    shim = user.folder.parent / "no-psycopg" / "psycopg"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n"
    )
    ran = user.run("anomalies", "--database", "postgresql://db.example/x",
                   PYTHONPATH=str(shim.parent))  # fmt: skip
    fails(ran, 1, "postgresql://db.example/x needs the psycopg driver", "pip install")
    assert user.files() == set()


def test_run_with_no_broker_at_the_bootstrap(user: User) -> None:
    port = free_port()
    ran = user.run("run", "--bootstrap", f"127.0.0.1:{port}", "--database", "sqlite:///x.db",
                   "--http-port", "0")  # fmt: skip
    fails(ran, 1, f"no Kafka broker answered at 127.0.0.1:{port}", "connection refused")
    assert user.files() == set()  # no database created


def test_publish_with_no_broker_names_the_address(user: User) -> None:
    (user.folder / "requests.jsonl").write_text('{"request_id": "a"}\n')
    port = free_port()
    ran = user.run("publish", "requests.jsonl", "--bootstrap", f"127.0.0.1:{port}")
    fails(ran, 1, f"no Kafka broker answered at 127.0.0.1:{port}", "--bootstrap")
    assert user.files() == {"requests.jsonl"}


def test_publish_with_sasl_to_a_broker_without_it_ends_in_time(
    user: User, broker: EmbeddedBroker
) -> None:
    (user.folder / "requests.jsonl").write_text('{"request_id": "a"}\n')
    sasl = {
        "INFERLANE_KAFKA__SECURITY__PROTOCOL": "SASL_PLAINTEXT",
        "INFERLANE_KAFKA__SECURITY__SASL_USERNAME": "user",
        "INFERLANE_KAFKA__SECURITY__SASL_PASSWORD": "secret-pw",
    }
    ran = user.run("publish", "requests.jsonl", "--bootstrap", broker.bootstrap, timeout_s=60,
                   **sasl)  # fmt: skip
    fails(ran, 1, "SASL_PLAINTEXT", "does not offer this SASL mechanism",
          "INFERLANE_KAFKA__SECURITY__")  # fmt: skip
    assert "secret-pw" not in ran.out + ran.err
    assert user.files() == {"requests.jsonl"}


def test_distributed_score_with_no_broker_names_the_address(user: User) -> None:
    (user.folder / "rows.csv").write_text("a\n1\n")
    port = free_port()
    ran = user.run("score", "--model", "digits", "--input", "rows.csv", "--input-column", "a",
                   "--distributed", "--bootstrap", f"127.0.0.1:{port}",
                   "--database", "sqlite:///jobs.db")  # fmt: skip
    fails(ran, 1, f"no Kafka broker answered at 127.0.0.1:{port}", "--bootstrap")
    assert user.files() == {"rows.csv"}  # no database, no failed job in it


def test_run_on_a_busy_http_port(user: User, held_port: int) -> None:
    ran = user.run("run", "--http-port", str(held_port), "--database", "sqlite:///x.db")
    fails(ran, 1, f"HTTP port {held_port} on 127.0.0.1 is already in use", "--http-port")
    assert user.files() == set()


def test_broker_on_a_busy_port(user: User, held_port: int) -> None:
    ran = user.run("broker", "--port", str(held_port), timeout_s=60)
    fails(ran, 1, f"port {held_port} on 127.0.0.1 is already in use", "--port")
    assert user.files() == set()


@pytest.mark.parametrize(
    "command", [["anomalies"], ["jobs", "list"], ["jobs", "show", "j"], ["rollout", "status"]]
)
def test_query_commands_never_create_a_database(user: User, command: list[str]) -> None:
    ran = user.run(*command)
    fails(ran, 1, "no database at inferlane.db (sqlite:///inferlane.db)", "--database")
    assert user.files() == set()


def test_a_query_on_a_database_without_the_schema(user: User) -> None:
    with sqlite3.connect(user.folder / "other.db") as conn:
        conn.execute("CREATE TABLE t (x)")
    ran = user.run("drift", "--database", "sqlite:///other.db")
    fails(ran, 1, "sqlite:///other.db has no drift_windows table")
    assert user.files() == {"other.db"}


def test_debug_shows_the_traceback(user: User) -> None:
    ran = user.run("--debug", "anomalies")
    assert ran.code == 1 and "Traceback" in ran.err and "CommandFailed" in ran.err
    assert user.files() == set()
