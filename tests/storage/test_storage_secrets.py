"""Secrets stay out of the terminal and logs: URL passwords redacted, SQL errors carry
statements but not the values bound to them."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from storage import make_engine, redacted_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg://app:pa55word@db.example:5432/inferlane",
            "postgresql+psycopg://app:***@db.example:5432/inferlane",
        ),
        ("postgresql://app@db/inferlane", "postgresql://app@db/inferlane"),
        ("sqlite:///inferlane.db", "sqlite:///inferlane.db"),
        ("not a url: pa55word", "<unparsable database URL>"),
    ],
)
def test_database_urls_print_without_their_password(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_a_failing_statement_does_not_carry_its_values(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE secrets_probe (k VARCHAR(20) PRIMARY KEY)"))
            conn.execute(text("INSERT INTO secrets_probe VALUES (:k)"), {"k": "private-value"})
        with pytest.raises(IntegrityError) as caught, engine.begin() as conn:
            conn.execute(text("INSERT INTO secrets_probe VALUES (:k)"), {"k": "private-value"})
        message = str(caught.value)
        assert "INSERT INTO secrets_probe" in message
        assert "[parameters:" not in message and "parameters hidden" in message
        # PostgreSQL's own DETAIL line may quote the key; SQLAlchemy adds nothing.
        assert "private-value" not in message.split("DETAIL")[0]
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS secrets_probe"))
        engine.dispose()
