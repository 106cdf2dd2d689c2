"""Gates and decisions on synthetic interval counts: pure policy, no worker."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from storage.rollouts import RolloutRecord
from worker.rollout.decide import judge
from worker.rollout.gates import Verdict, evaluate, overall
from worker.rollout.plan import Gates, State
from worker.rollout.stats import VersionStats

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GATES = Gates(min_requests=50, min_compared=30, min_labelled=30)


def stats(
    n: int = 100,
    errors: int = 0,
    ms: float = 2.0,
    compared: int = 0,
    disagree: float = 0.0,
    labelled: int = 0,
    wrong: int = 0,
) -> VersionStats:
    s = VersionStats(requests=n, errors=errors, compared=compared, disagreement_sum=disagree)
    s.add_latency(ms, n)
    for i in range(labelled):
        s.add_label(1.0 if i < wrong else 0.0, 0.0)
    return s


def record(**changes: object) -> RolloutRecord:
    base = RolloutRecord(
        id=1, model="digits", candidate_version="2", primary_version="1", mode="canary",
        state="running", steps=[1, 5, 25, 50, 100], step=0, share=0.01, sample=0.1,
        interval_s=30, passes_needed=2, passes=0, gates=GATES.model_dump(), revision=1,
        interval_start=T0, reason=None, created_at=T0, updated_at=T0,
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def verdicts(primary: VersionStats, candidate: VersionStats) -> dict[str, Verdict]:
    return {v.name: v.verdict for v in evaluate(primary, candidate, GATES, classifier=True)}


def test_an_equivalent_candidate_passes_every_gate() -> None:
    got = verdicts(stats(labelled=40, wrong=2), stats(compared=40, labelled=40, wrong=2))
    assert set(got.values()) == {Verdict.PASS}


def test_each_gate_fails_on_its_own_measure() -> None:
    base = stats(labelled=40, wrong=2)
    assert verdicts(base, stats(errors=5, compared=40))["error_rate_increase"] is Verdict.FAIL
    assert verdicts(base, stats(ms=200.0, compared=40))["p99_ms"] is Verdict.FAIL
    assert verdicts(base, stats(compared=40, disagree=8))["disagreement"] is Verdict.FAIL
    worse = verdicts(base, stats(compared=40, labelled=40, wrong=10))
    assert worse["label_error_increase"] is Verdict.FAIL


def test_too_little_data_waits_and_missing_labels_do_not_block() -> None:
    got = verdicts(stats(), stats(n=10, compared=5))
    assert got["error_rate_increase"] is Verdict.WAIT and got["disagreement"] is Verdict.WAIT
    values = evaluate(stats(), stats(compared=40), GATES, classifier=True)
    assert {v.name: v.verdict for v in values}["label_error_increase"] is Verdict.WAIT
    assert overall(values) is Verdict.PASS


def test_regressors_compare_mean_absolute_error_relative_to_the_primary() -> None:
    primary, candidate = VersionStats(), VersionStats()
    for _ in range(40):
        primary.add_label(10.0, 0.0)
        candidate.add_label(10.5, 0.0)  # 5% worse
    values = {v.name: v for v in evaluate(primary, candidate, GATES, classifier=False)}
    assert math.isclose(values["label_error_increase"].value, 0.05)
    assert values["label_error_increase"].verdict is Verdict.FAIL


def test_a_failing_gate_rolls_back_at_once_mid_interval() -> None:
    values = evaluate(stats(), stats(errors=20, compared=40), GATES, classifier=True)
    decision = judge(record(), values, T0 + timedelta(seconds=1))
    assert decision is not None and decision.decision == "rollback"
    assert decision.state is State.ROLLED_BACK and decision.share == 0.0
    assert "error_rate_increase" in (decision.reason or "")


def test_passes_advance_the_steps_and_the_last_step_promotes() -> None:
    values = evaluate(stats(), stats(compared=40), GATES, classifier=True)
    assert judge(record(), values, T0 + timedelta(seconds=10)) is None  # interval running
    end = T0 + timedelta(seconds=30)
    first = judge(record(), values, end)
    assert first is not None and (first.decision, first.passes, first.share) == ("pass", 1, 0.01)
    second = judge(record(passes=1), values, end)
    assert second is not None and second.decision == "advance"
    assert (second.step, second.share, second.passes) == (1, 0.05, 0)
    last = judge(record(step=4, share=1.0, passes=1), values, end)
    assert last is not None and last.decision == "promote" and last.state is State.PROMOTED


def test_an_interval_without_enough_data_is_extended_not_counted() -> None:
    values = evaluate(stats(), stats(n=3), GATES, classifier=True)
    decision = judge(record(passes=1), values, T0 + timedelta(seconds=31))
    assert decision is not None and decision.decision == "wait" and decision.passes == 1
    assert decision.interval_start == T0 + timedelta(seconds=31)


def test_shadow_counts_passes_and_waits_for_a_person() -> None:
    values = evaluate(stats(), stats(compared=40), GATES, classifier=True)
    decision = judge(record(mode="shadow", share=0.0, passes=1), values, T0 + timedelta(seconds=30))
    assert decision is not None and decision.decision == "pass"
    assert decision.state is State.RUNNING and decision.share == 0.0
    assert "ready to promote" in (decision.reason or "")


def test_p99_of_summed_histograms() -> None:
    s = VersionStats()
    s.add_latency(1.0, 990)
    s.add_latency(500.0, 10)
    assert 1.0 <= s.p99_ms() < 1.3
    s.add_latency(500.0, 1)
    assert 500.0 <= s.p99_ms() < 650.0
    assert math.isnan(VersionStats().p99_ms())
