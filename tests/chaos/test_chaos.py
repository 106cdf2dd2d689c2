"""Short versions of each chaos scenario (``python -m bench.chaos`` runs the long ones):
``inferlane run`` subprocesses on the embedded broker with PostgreSQL behind a proxy.
Run them alone with ``pytest -m chaos``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.chaos.scenarios import (
    Row,
    Sizes,
    broker_freeze,
    database_outage,
    hostile,
    hung_model,
    join_and_leave,
    sigkills,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(420)]

SIZES = Sizes(
    requests=1_500,
    kill_requests=2_000,
    kills=2,
    kill_rate_per_s=150.0,
    rate_per_s=300.0,
    outage_s=4.0,
    freeze_s=4.0,
    dwell_s=4.0,
    hostile=300,
    hang_timeout_s=3.0,
    settle_s=150.0,
)


@pytest.fixture(autouse=True)
def postgresql(request: pytest.FixtureRequest) -> None:
    """Skips without PostgreSQL on a developer's machine; fails under CI."""
    request.getfixturevalue("pg_database")


def run(scenario: Callable[[Path, Sizes], Row], tmp_path: Path) -> Row:
    row = scenario(tmp_path, SIZES)
    print(row)  # shown on failure: notes, recovery, RSS
    assert row.lost == 0
    assert row.sql_duplicates == 0
    assert row.exits == 0
    return row


def test_sigkills_mid_stream_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    row = run(sigkills, tmp_path)
    assert row.notes[0] != "0 SIGKILLs"  # the faults did happen
    assert row.recovery_s is not None


def test_postgresql_unreachable_then_back(tmp_path: Path) -> None:
    assert run(database_outage, tmp_path).recovery_s is not None


def test_broker_frozen_then_thawed(tmp_path: Path) -> None:
    assert run(broker_freeze, tmp_path).recovery_s is not None


def test_a_second_worker_joins_and_leaves(tmp_path: Path) -> None:
    assert run(join_and_leave, tmp_path).recovery_s is not None


def test_hostile_records_end_as_results_or_dead_letters(tmp_path: Path) -> None:
    run(hostile, tmp_path)


def test_a_model_that_hangs_on_one_input(tmp_path: Path) -> None:
    row = run(hung_model, tmp_path)
    assert "hang-3: model_timeout" in row.notes
