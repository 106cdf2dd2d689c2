"""``inferlane rollout start | status | promote | abort`` as a user types them, on a
SQLite file and on PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner, Result

from storage import make_engine
from storage.rollouts import RolloutStore
from tests.rollout.registries import with_candidates
from worker.cli import app

REGISTRY = with_candidates(
    """steps = [10, 50, 100]
interval_s = 30
passes = 3
gates = { max_disagreement = 0.1 }"""
)

EVENT_KEYS = {"id", "rollout_id", "at", "step", "share", "decision", "gates", "reason"}
ROLLOUT_KEYS = {
    "id", "model", "candidate_version", "primary_version", "mode", "state", "steps", "step",
    "share", "sample", "interval_s", "passes_needed", "passes", "gates", "revision",
    "interval_start", "reason", "created_at", "updated_at", "events",
}  # fmt: skip


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "registry.toml"
    path.write_text(REGISTRY)
    return path


def run(*args: str, code: int = 0, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(app, ["rollout", *args], env=env)
    assert result.exit_code == code, result.output
    return result


def words(result: Result) -> str:
    """Table borders out, whitespace folded: the words in the order a user reads them."""
    return " ".join(re.sub(r"[\u2500-\u257f]", " ", result.output).split())


def status_json(db_url: str, *model: str) -> list[dict[str, object]]:
    out = orjson.loads(run("status", *model, "--json", "-d", db_url).stdout)
    assert set(out) == {"rollouts"}
    rollouts: list[dict[str, object]] = out["rollouts"]
    return rollouts


def nothing_written(db_url: str, command: str = "status") -> None:
    """``command`` on a database no rollout was written to: refused, none made for it."""
    refused = words(
        run(command, *([] if command == "status" else ["digits"]), "-d", db_url, code=1)
    )
    if db_url.startswith("sqlite"):
        assert "no database at" in refused and not Path(db_url.split("///")[1]).exists()
    else:
        assert "has no rollouts table" in refused


def test_start_takes_the_candidates_plan_and_the_flags_over_it(db_url: str, registry: Path) -> None:
    flags = ("--interval", "2m", "--sample", "0.2", "--reason", "new weights")
    started = run("start", "digits", "--version", "2", "--models", str(registry), "-d", db_url,
                  *flags)  # fmt: skip
    assert "started rollout #1: digits 1 -> 2, canary, running, share 10%" in words(started)

    engine = make_engine(db_url)
    record = RolloutStore(engine).latest("digits")
    engine.dispose()
    assert record is not None
    assert (record.steps, record.share, record.interval_s) == ([10.0, 50.0, 100.0], 0.1, 120.0)
    assert (record.passes_needed, record.sample, record.reason) == (3, 0.2, "new weights")
    assert record.gates["max_disagreement"] == 0.1 and record.gates["min_requests"] == 50

    # Without a plan in the registry: the defaults; shadow answers nothing.
    run("start", "diabetes", "--version", "2", "--mode", "shadow", "--interval", "45",
        "--models", str(registry), "-d", db_url)  # fmt: skip
    [diabetes] = status_json(db_url, "diabetes")
    assert (diabetes["mode"], diabetes["share"], diabetes["interval_s"]) == ("shadow", 0.0, 45.0)
    assert diabetes["steps"] == [1.0, 5.0, 25.0, 50.0, 100.0]
    assert diabetes["primary_version"] == "1" and diabetes["candidate_version"] == "2"


def test_the_registry_and_database_come_from_the_worker_settings(
    db_url: str, registry: Path
) -> None:
    env = {"INFERLANE_MODELS": str(registry), "INFERLANE_DATABASE_URL": db_url}
    run("start", "digits", "--version", "2", env=env)
    [record] = status_json(db_url)
    assert record["model"] == "digits"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("house", "--version", "2"), "no model 'house' in the registry (it has: digits,"),
        (("digits", "--version", "9"), "no candidate version '9' in [[candidates]] (2)"),
        (("digits", "--version", "1"), "digits has no candidate version '1'"),
        (("digits", "--version", "2", "--steps", "5,1"), "steps must be distinct, ascending"),
        (("digits", "--version", "2", "--sample", "2"), "sample"),
        (("digits", "--version", "2", "--interval", "soon"), "--interval takes 60s, 2m or"),
        (("digits", "--version", "2", "--steps", "a,b"), "--steps takes percents"),
    ],
)  # fmt: skip
def test_start_refuses_what_the_registry_or_the_plan_does_not_allow(
    db_url: str, registry: Path, args: tuple[str, ...], message: str
) -> None:
    refused = run("start", *args, "--models", str(registry), "-d", db_url, code=2)
    assert message in " ".join(refused.output.split())
    nothing_written(db_url)


def test_start_refuses_a_second_running_rollout(db_url: str, registry: Path) -> None:
    run("start", "digits", "--version", "2", "--models", str(registry), "-d", db_url)
    refused = run("start", "digits", "--version", "2", "--models", str(registry), "-d", db_url,
                  code=2)  # fmt: skip
    assert "model 'digits' has a running rollout (#1)" in refused.output
    assert len(status_json(db_url)) == 1


def test_promote_and_abort_end_a_running_rollout(db_url: str, registry: Path) -> None:
    for model in ("digits", "diabetes"):
        run("start", model, "--version", "2", "--models", str(registry), "-d", db_url)

    promoted = run("promote", "digits", "-d", db_url)
    assert "rollout #1 promoted" in words(promoted)
    aborted = run("abort", "diabetes", "--reason", "p99 too high", "-d", db_url)
    assert "rollout #2 aborted" in words(aborted)

    diabetes, digits = status_json(db_url)  # by model name
    assert (digits["state"], digits["share"], digits["step"]) == ("promoted", 1.0, 2)
    assert (diabetes["state"], diabetes["share"], diabetes["step"]) == ("aborted", 0.0, 0)
    assert diabetes["reason"] == "p99 too high"
    assert [e["decision"] for e in diabetes["events"]] == ["start", "abort"]  # type: ignore[attr-defined]

    for command in ("promote", "abort"):
        refused = run(command, "digits", "-d", db_url, code=2)
        assert "no running rollout of 'digits' (the newest, #1, is promoted)" in refused.output
    assert "no running rollout of 'minilm'" in run("abort", "minilm", "-d", db_url, code=2).output
    # A new rollout may start once none is running.
    run("start", "diabetes", "--version", "2", "--models", str(registry), "-d", db_url)


def test_status_shows_each_models_newest_rollout(db_url: str, registry: Path) -> None:
    for command in ("status", "abort", "promote"):
        nothing_written(db_url, command)
    run("start", "digits", "--version", "2", "--models", str(registry), "-d", db_url)
    assert "no rollouts of minilm" in words(run("status", "minilm", "-d", db_url))
    run("abort", "digits", "-d", db_url)
    run("start", "digits", "--version", "2", "--models", str(registry), "-d", db_url)
    engine = make_engine(db_url)
    store = RolloutStore(engine)
    seen = store.latest("digits")
    assert seen is not None
    store.decide(
        seen, decision="rollback", state="rolled_back", step=0, share=0.0, passes=0,
        interval_start=seen.interval_start, reason="disagreement 0.31 > 0.1",
        gates={"disagreement": {"value": 0.31, "threshold": 0.1, "verdict": "fail"}},
    )  # fmt: skip
    engine.dispose()

    shown = words(run("status", "-d", db_url))
    for expected in (
        *("digits: rollout #2, rolled_back", "mode canary, sample 10%", "versions 1 -> 2"),
        *("step 1/3 of 10, 50, 100%", "share 0.0%", "passes 0/3", "interval 30s"),
        *("last decision rollback: disagreement 0.31 > 0.1", "disagreement 0.31/0.1 FAIL"),
    ):
        assert expected in shown, shown

    [newest] = status_json(db_url, "digits")
    assert set(newest) == ROLLOUT_KEYS
    assert (newest["id"], newest["state"], newest["revision"]) == (2, "rolled_back", 1)
    events = newest["events"]
    assert isinstance(events, list) and [e["decision"] for e in events] == ["start", "rollback"]
    assert all(set(e) == EVENT_KEYS for e in events)
    failed = {"value": 0.31, "threshold": 0.1, "verdict": "fail"}
    assert events[1]["gates"]["disagreement"] == failed
    assert str(newest["interval_start"]).endswith("+00:00")
    assert status_json(db_url, "diabetes") == []
