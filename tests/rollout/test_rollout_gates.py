"""Gates and decisions on synthetic interval counts: pure policy, no worker."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from storage.rollouts import RolloutRecord
from worker.rollout.decide import judge
from worker.rollout.gates import GateValue, Measures, Pair, Verdict, evaluate, overall
from worker.rollout.stats import VersionStats
from worker.settings.rollout_plan import Gates, State

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GATES = Gates()
CLASSIFIER = Measures(binary_labels=True, disagreement_bound=1.0)
REGRESSOR = Measures(binary_labels=False, disagreement_bound=None)


def stats(
    n: int = 2000,
    errors: int = 0,
    ms: float = 2.0,
    compared: int = 0,
    disagree: float = 0.0,
    labelled: int = 0,
    wrong: int = 0,
) -> VersionStats:
    s = VersionStats(requests=n, errors=errors, compared=compared, disagreement_sum=disagree)
    s.add_latency(ms, n)
    s.labelled, s.wrong = labelled, wrong
    return s


def primary(labelled: int = 20_000, wrong: int = 600) -> VersionStats:
    """A primary with plenty of counts: 97% accurate by default."""
    return stats(n=20_000, labelled=labelled, wrong=wrong)


def gate_values(
    p: VersionStats, c: VersionStats, measures: Measures = CLASSIFIER
) -> dict[str, GateValue]:
    """The gates with the same counts in the interval as in the whole rollout."""
    pair = Pair(p, c)
    return {v.name: v for v in evaluate(pair, pair, GATES, measures)}


def both(p: VersionStats, c: VersionStats) -> list[GateValue]:
    return evaluate(Pair(p, c), Pair(p, c), GATES, CLASSIFIER)


def record(**changes: object) -> RolloutRecord:
    base = RolloutRecord(
        id=1, model="digits", candidate_version="2", primary_version="1", mode="canary",
        state="running", steps=[1, 5, 25, 50, 100], step=0, share=0.01, sample=0.1,
        interval_s=30, passes_needed=2, passes=0, gates=GATES.model_dump(), revision=1,
        interval_start=T0, reason=None, created_at=T0, updated_at=T0,
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def verdicts(p: VersionStats, c: VersionStats) -> dict[str, Verdict]:
    return {name: v.verdict for name, v in gate_values(p, c).items()}


def test_an_equivalent_candidate_passes_every_gate_once_the_counts_decide() -> None:
    got = verdicts(primary(), stats(compared=300, labelled=2000, wrong=60))
    assert set(got.values()) == {Verdict.PASS}


def test_few_counts_wait_instead_of_failing() -> None:
    # The rollback: 1 wrong in 33 labels against 34 in 7,541 (+2.6 points).
    early = gate_values(primary(7541, 34), stats(n=33, compared=5, labelled=33, wrong=1))
    label = early["label_error_increase"]
    assert label.value > 0.02 and label.verdict is Verdict.WAIT
    assert label.low < 0 < label.allowed + 0.05 < label.high  # the sequence holds both
    assert early["disagreement"].verdict is Verdict.WAIT
    assert early["error_rate_increase"].verdict is Verdict.WAIT


def test_each_gate_fails_on_its_own_measure() -> None:
    base = primary()
    assert verdicts(base, stats(errors=100, compared=300))["error_rate_increase"] is Verdict.FAIL
    assert verdicts(base, stats(ms=200.0, compared=300))["p99_ms"] is Verdict.FAIL
    assert verdicts(base, stats(compared=300, disagree=30))["disagreement"] is Verdict.FAIL
    worse = verdicts(base, stats(compared=300, labelled=2000, wrong=160))  # 8% against 3%
    assert worse["label_error_increase"] is Verdict.FAIL


def test_a_candidate_between_allowed_and_limit_waits() -> None:
    got = verdicts(primary(), stats(compared=300, disagree=9, labelled=2000, wrong=110))
    assert got["disagreement"] is Verdict.WAIT  # 3%: neither above 1% nor below 5% yet
    assert got["label_error_increase"] is Verdict.WAIT  # +2.5 points


def test_missing_labels_do_not_block_but_labels_must_decide() -> None:
    unlabelled = evaluate(
        Pair(stats(), stats(compared=300)), Pair(stats(), stats(compared=300)), GATES, CLASSIFIER
    )
    label = {v.name: v for v in unlabelled}["label_error_increase"]
    assert label.verdict is Verdict.WAIT and not label.required
    assert overall(unlabelled) is Verdict.PASS
    few = Pair(primary(), stats(compared=300, labelled=40, wrong=1))
    labelled = evaluate(few, few, GATES, CLASSIFIER)
    assert {v.name: v for v in labelled}["label_error_increase"].required
    assert overall(labelled) is Verdict.WAIT


def test_p99_judges_the_interval_and_the_tests_the_rollout() -> None:
    slow_then = Pair(stats(), stats(ms=200.0, compared=300, labelled=2000, wrong=60))
    now = Pair(stats(n=100), stats(n=100))
    got = {v.name: v.verdict for v in evaluate(now, Pair(primary(), slow_then.candidate),
                                                GATES, CLASSIFIER)}  # fmt: skip
    assert got["p99_ms"] is Verdict.PASS  # the slow batches were an earlier interval's
    assert got["label_error_increase"] is Verdict.PASS


def test_embedding_distances_are_tested_as_shares_of_their_bound() -> None:
    embedding = Measures(binary_labels=False, disagreement_bound=2.0)
    near = gate_values(stats(), stats(compared=1000, disagree=0.5), embedding)["disagreement"]
    assert near.verdict is Verdict.PASS and near.high < 0.05
    far = gate_values(stats(), stats(compared=1000, disagree=150.0), embedding)["disagreement"]
    assert far.verdict is Verdict.FAIL and far.high <= 2.0  # mean 0.15


def test_outputs_that_cannot_be_compared_fail() -> None:
    got = verdicts(primary(), stats(compared=3, disagree=math.inf))
    assert got["disagreement"] is Verdict.FAIL


def test_regressors_compare_mean_absolute_error_relative_to_the_primary() -> None:
    p, c = VersionStats(), VersionStats()
    for _ in range(40):
        p.add_label(10.0)
        c.add_label(10.6)  # 6% worse
    values = gate_values(p, c, REGRESSOR)
    assert math.isclose(values["label_error_increase"].value, 0.06)
    assert values["label_error_increase"].verdict is Verdict.FAIL


def test_allowed_levels_must_lie_below_the_limits() -> None:
    with pytest.raises(ValidationError, match="allowed_disagreement"):
        Gates(allowed_disagreement=0.05, max_disagreement=0.05)


def test_a_failing_gate_rolls_back_at_once_mid_interval() -> None:
    values = both(primary(), stats(errors=100, compared=300))
    decision = judge(record(), values, T0 + timedelta(seconds=1))
    assert decision is not None and decision.decision == "rollback"
    assert decision.state is State.ROLLED_BACK and decision.share == 0.0
    assert "error_rate_increase" in (decision.reason or "")


def test_a_slow_interval_is_judged_whole_at_its_end() -> None:
    """p99 of a partial interval: a stalled batch or two among the first results."""
    values = both(stats(), stats(ms=200.0, compared=300))
    assert judge(record(), values, T0 + timedelta(seconds=1)) is None
    decision = judge(record(), values, T0 + timedelta(seconds=30))
    assert decision is not None and decision.decision == "rollback"
    assert (decision.reason or "").startswith("p99_ms")


def test_passes_advance_the_steps_and_the_last_step_promotes() -> None:
    values = both(stats(), stats(compared=300))  # no labels: three gates decide
    assert judge(record(), values, T0 + timedelta(seconds=10)) is None  # interval running
    end = T0 + timedelta(seconds=30)
    first = judge(record(), values, end)
    assert first is not None and (first.decision, first.passes, first.share) == ("pass", 1, 0.01)
    second = judge(record(passes=1), values, end)
    assert second is not None and second.decision == "advance"
    assert (second.step, second.share, second.passes) == (1, 0.05, 0)
    last = judge(record(step=4, share=1.0, passes=1), values, end)
    assert last is not None and last.decision == "promote" and last.state is State.PROMOTED


def test_an_undecided_interval_is_extended_not_counted() -> None:
    values = both(primary(), stats(n=3))
    decision = judge(record(passes=1), values, T0 + timedelta(seconds=31))
    assert decision is not None and decision.decision == "wait" and decision.passes == 1
    assert decision.reason == (
        "undecided: error_rate_increase, p99_ms, disagreement, label_error_increase"
    )
    assert decision.interval_start == T0 + timedelta(seconds=31)


def test_shadow_counts_passes_and_waits_for_a_person() -> None:
    values = both(stats(), stats(compared=300))  # no labels: three gates decide
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
