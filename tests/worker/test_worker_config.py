"""WorkerSettings: env INFERLANE_* (nested with __), defaults, validation."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from consumers.contract import Priority
from worker.settings import WorkerSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("INFERLANE_"):
            monkeypatch.delenv(name)


def test_defaults_are_the_documented_names() -> None:
    s = WorkerSettings()
    assert s.bootstrap is None
    assert s.database_url == "sqlite:///inferlane.db"
    assert s.topics.lane_topics() == {
        "inferlane.requests.high": Priority.HIGH,
        "inferlane.requests": Priority.NORMAL,
        "inferlane.requests.low": Priority.LOW,
    }
    assert s.topics.results == "inferlane.results"
    assert s.topics.dead_letters == "inferlane.requests.dlq"
    assert s.batching.max_wait_s == pytest.approx(s.batching.max_wait_ms / 1000)


def test_env_sets_top_level_and_nested_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERLANE_BOOTSTRAP", "kafka:9092")
    monkeypatch.setenv("INFERLANE_DATABASE_URL", "postgresql+psycopg://u@db/x")
    monkeypatch.setenv("INFERLANE_BATCHING__MAX_BATCH", "32")
    monkeypatch.setenv("INFERLANE_BATCHING__MAX_WAIT_MS", "2.5")
    monkeypatch.setenv("INFERLANE_TOPICS__HIGH", "urgent")
    monkeypatch.setenv("INFERLANE_SINK__WRITE_PROCESS", "true")

    s = WorkerSettings()

    assert s.bootstrap == "kafka:9092"
    assert s.database_url == "postgresql+psycopg://u@db/x"
    assert s.batching.max_batch == 32
    assert s.batching.max_wait_s == pytest.approx(0.0025)
    assert s.batching.prefetch == 2  # the rest of the group keeps its defaults
    assert s.topics.high == "urgent" and s.topics.normal == "inferlane.requests"
    assert s.sink.write_process is True


def test_arguments_win_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERLANE_BOOTSTRAP", "from-env:9092")
    assert WorkerSettings(bootstrap="from-arg:9092").bootstrap == "from-arg:9092"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("INFERLANE_BATCHING__MAX_BATCH", "0"),
        ("INFERLANE_BATCHING__MAX_BATCH", "many"),
        ("INFERLANE_BATCHING__MAX_WAIT_MS", "-1"),
        ("INFERLANE_BATCHING__MAX_BATCHES", "8"),  # a typo is an error, not ignored
        ("INFERLANE_LANES__CAPACITY", "0"),
        ("INFERLANE_TORCH_THREADS", "0"),
    ],
)
def test_invalid_env_values_are_rejected(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError):
        WorkerSettings()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("INFERLANE_TOPICS__RESULTS", "inferlane.requests"),
        ("INFERLANE_TOPICS__DEAD_LETTERS", "inferlane.results"),
        ("INFERLANE_TOPICS__LOW", "inferlane.requests.high"),
    ],
)
def test_topics_must_be_distinct(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match="must be distinct"):
        WorkerSettings()


def test_unrelated_inferlane_env_vars_do_not_break_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERLANE_TEST_PG_URL", "postgresql+psycopg://postgres@h/test")
    assert WorkerSettings().bootstrap is None


def test_settings_are_frozen() -> None:
    s = WorkerSettings()
    with pytest.raises(ValidationError):
        s.bootstrap = "x:1"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        s.batching.max_batch = 1  # type: ignore[misc]


def test_the_device_is_auto_by_default_and_a_torch_device_name_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from worker.launch import resolve_device

    assert WorkerSettings().device == "auto"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    monkeypatch.setenv("INFERLANE_DEVICE", "cuda:1")
    assert resolve_device(WorkerSettings().device) == torch.device("cuda", 1)
    monkeypatch.setenv("INFERLANE_DEVICE", "gpu-please")
    with pytest.raises(ValidationError, match="device"):
        WorkerSettings()
