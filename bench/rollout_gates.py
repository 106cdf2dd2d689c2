"""``python -m bench.rollout_gates [--rollouts N] [--rate R] [--seed S]``

How often the rollout gates decide wrongly, measured: seeded canary rollouts of a
classifier, simulated at the count level and decided by the worker's own code
(``gates.evaluate`` and ``decide.judge``, every poll, with the default plan and gates).
Each poll adds ``rate`` labelled requests, routed to the candidate at its share; a
``sample`` of the candidate's answers is also run on the primary (its labels count for
the primary, its disagreements for the candidate), as the worker does. Latencies are
equal and errors absent, so only the labelled-error and disagreement tests can
decide. Each worse scenario moves one measure only: its row is that gate's power.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import numpy as np
from rich.console import Console
from rich.table import Table

from storage.rollouts import RolloutRecord
from worker.rollout.decide import judge
from worker.rollout.gates import Measures, Pair, Verdict, evaluate
from worker.rollout.stats import VersionStats
from worker.settings.rollout_plan import Gates, RolloutPlan, State

CLASSIFIER = Measures(binary_labels=True, disagreement_bound=1.0)
T0 = datetime(2026, 12, 6, tzinfo=UTC)
LATENCY_MS = 2.0


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    accuracy: float  # the primary's share of right answers
    worse_by: float = 0.0  # the candidate's misclassified share minus the primary's
    disagreement: float = 0.0  # share of compared inputs the two label differently

    @property
    def bad(self) -> bool:
        """A candidate the gates must roll back."""
        return self.worse_by > 0 or self.disagreement > 0


def scenarios(worse_by: float = 0.05, disagreement: float = 0.05) -> list[Scenario]:
    out = []
    for accuracy in (0.97, 0.994):
        out += [
            Scenario("equivalent", accuracy),
            Scenario(f"{worse_by:.0%} worse labels", accuracy, worse_by=worse_by),
            Scenario(f"disagrees on {disagreement:.0%}", accuracy, disagreement=disagreement),
        ]
    return out


@dataclass(frozen=True, slots=True)
class Traffic:
    rate: float = 200.0  # labelled requests per second, all of the model's traffic
    poll_s: float = 1.0  # the worker's rollout.poll_s
    max_s: float = 6 * 3600.0  # a rollout still running then counts as undecided


@dataclass(frozen=True, slots=True)
class Ending:
    state: str  # promoted, rolled_back, or running (undecided at max_s)
    seconds: float
    labelled: int  # the candidate's labelled answers when the rollout ended
    compared: int  # its answers compared with the primary's then
    labels_passed: int | None  # its labelled answers when the label gate first passed
    compared_passed: int | None  # its compared answers when disagreement first passed


def run_rollout(
    scenario: Scenario, plan: RolloutPlan, traffic: Traffic, rng: np.random.Generator
) -> Ending:
    """One canary rollout, poll by poll, until promoted, rolled back or ``max_s``."""
    record = _record(plan)
    interval, total = Pair(VersionStats(), VersionStats()), Pair(VersionStats(), VersionStats())
    p_wrong = 1.0 - scenario.accuracy
    c_wrong = p_wrong + scenario.worse_by
    per_poll = round(traffic.rate * traffic.poll_s)
    labels_passed = compared_passed = None
    t = 0.0
    while record.state == State.RUNNING and t < traffic.max_s:
        t += traffic.poll_s
        served = int(rng.binomial(per_poll, record.share))
        compared = int(rng.binomial(served, plan.sample))
        _serve(interval, total, per_poll - served, served, compared, rng, p_wrong, c_wrong)
        for pair in (interval, total):
            pair.candidate.compared += compared
            pair.candidate.disagreement_sum += float(rng.binomial(compared, scenario.disagreement))
        values = evaluate(interval, total, plan.gates, CLASSIFIER)
        verdicts = {v.name: v.verdict for v in values}
        if labels_passed is None and verdicts["label_error_increase"] is Verdict.PASS:
            labels_passed = total.candidate.labelled
        if compared_passed is None and verdicts["disagreement"] is Verdict.PASS:
            compared_passed = total.candidate.compared
        decision = judge(record, values, T0 + timedelta(seconds=t))
        if decision is None:
            continue
        record = replace(
            record,
            state=decision.state.value,
            step=decision.step,
            share=decision.share,
            passes=decision.passes,
            interval_start=decision.interval_start,
        )
        interval = Pair(VersionStats(), VersionStats())  # the next interval's counts
    c = total.candidate
    return Ending(record.state, t, c.labelled, c.compared, labels_passed, compared_passed)


def _serve(
    interval: Pair,
    total: Pair,
    primary_served: int,
    candidate_served: int,
    compared: int,
    rng: np.random.Generator,
    p_wrong: float,
    c_wrong: float,
) -> None:
    """Count one poll's answers: each version's own, and the primary's answers to the
    compared inputs (labelled, as the worker counts them)."""
    primary_n = primary_served + compared
    primary_bad = int(rng.binomial(primary_n, p_wrong))
    candidate_bad = int(rng.binomial(candidate_served, c_wrong))
    for pair in (interval, total):
        for stats, n, wrong in (
            (pair.primary, primary_n, primary_bad),
            (pair.candidate, candidate_served, candidate_bad),
        ):
            stats.requests += n
            stats.labelled += n
            stats.wrong += wrong
            stats.add_latency(LATENCY_MS, n)


def _record(plan: RolloutPlan) -> RolloutRecord:
    return RolloutRecord(
        id=1, model="digits", candidate_version="2", primary_version="1", mode=plan.mode.value,
        state=State.RUNNING.value, steps=plan.steps, step=0, share=plan.steps[0] / 100,
        sample=plan.sample, interval_s=plan.interval_s, passes_needed=plan.passes, passes=0,
        gates=plan.gates.model_dump(), revision=0, interval_start=T0, reason=None,
        created_at=T0, updated_at=T0,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Summary:
    scenario: Scenario
    endings: list[Ending]

    def share(self, state: State) -> float:
        return sum(e.state == state.value for e in self.endings) / len(self.endings)

    @property
    def wrong(self) -> float:
        """Rollbacks of an equivalent candidate; anything but a rollback of a bad one."""
        if self.scenario.bad:
            return 1.0 - self.share(State.ROLLED_BACK)
        return self.share(State.ROLLED_BACK)


def simulate(
    scenario: Scenario,
    rollouts: int,
    *,
    seed: int = 0,
    plan: RolloutPlan | None = None,
    traffic: Traffic | None = None,
) -> Summary:
    """``rollouts`` seeded rollouts of one scenario (seed + i for the i-th)."""
    plan = plan or RolloutPlan()
    traffic = traffic or Traffic()
    endings = [
        run_rollout(scenario, plan, traffic, np.random.default_rng([seed, i]))
        for i in range(rollouts)
    ]
    return Summary(scenario, endings)


def _quantiles(values: list[int | None] | list[int] | list[float], digits: int = 0) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    median, p99 = np.quantile(known, [0.5, 0.99])
    return f"{median:,.{digits}f} / {p99:,.{digits}f} / {max(known):,.{digits}f}"


def report(summaries: list[Summary], console: Console) -> None:
    table = Table(title="rollout gates: seeded canary rollouts (median / 99th pct / max)")
    for column in (
        "primary accuracy",
        "candidate",
        "rollouts",
        "rolled back",
        "promoted",
        "undecided",
        "labels at the end",
        "compared at the end",
        "labels when the label gate passed",
        "compared when disagreement passed",
        "minutes at the end",
    ):
        table.add_column(column, justify="right")
    for s in summaries:
        table.add_row(
            f"{s.scenario.accuracy:.1%}",
            s.scenario.name,
            f"{len(s.endings):,}",
            f"{s.share(State.ROLLED_BACK):.1%}",
            f"{s.share(State.PROMOTED):.1%}",
            f"{s.share(State.RUNNING):.1%}",
            _quantiles([e.labelled for e in s.endings]),
            _quantiles([e.compared for e in s.endings]),
            _quantiles([e.labels_passed for e in s.endings]),
            _quantiles([e.compared_passed for e in s.endings]),
            _quantiles([e.seconds / 60 for e in s.endings], digits=1),
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rollout_gates", description=__doc__)
    parser.add_argument("--rollouts", type=int, default=1000, help="per scenario")
    parser.add_argument("--rate", type=float, default=200.0, help="labelled requests/s")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    console = Console(width=240)  # the table is wide: never wrapped
    plan, gates = RolloutPlan(), Gates()
    console.print(
        f"default plan: steps {plan.steps}, interval {plan.interval_s:g} s, passes "
        f"{plan.passes}, sample {plan.sample}; gates: alpha {gates.alpha}, labelled error "
        f"allowed {gates.allowed_label_error_increase} / max {gates.max_label_error_increase}, "
        f"disagreement allowed {gates.allowed_disagreement} / max {gates.max_disagreement}; "
        f"{args.rate:g} labelled requests/s, poll 1 s"
    )
    traffic = Traffic(rate=args.rate)
    summaries = []
    for scenario in scenarios():
        summary = simulate(scenario, args.rollouts, seed=args.seed, traffic=traffic)
        summaries.append(summary)
        console.print(
            f"{scenario.accuracy:.1%} {scenario.name}: wrong decisions {summary.wrong:.2%}"
        )
    report(summaries, console)


if __name__ == "__main__":
    main()
