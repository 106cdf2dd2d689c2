"""What a rollout does next, given its state and its gates' verdict: pure policy.

A failing sequential gate rolls back at once, mid-interval (its test is valid at any
look); a failing point gate (p99, and regressors' means) at the interval's end, on the
whole interval's counts. Otherwise nothing happens until the interval ends; then it
passes if every required gate passes (the sequential gates
have decided "no worse" on the rollout's counts so far; the p99 gate holds in the
interval), and ``passes_needed`` passes in a row advance the canary one step (the last
step promotes). An interval with an undecided required gate starts again, its passes
kept. Shadow rollouts count passes and wait for a person to promote them: the
candidate has never answered a request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from storage.rollouts import RolloutRecord
from worker.rollout.gates import GateValue, Verdict, overall
from worker.settings.rollout_plan import Mode, State


@dataclass(frozen=True, slots=True)
class Decision:
    decision: str  # pass, wait, advance, promote, rollback
    state: State
    step: int
    share: float
    passes: int
    interval_start: datetime
    reason: str | None


def judge(r: RolloutRecord, values: list[GateValue], now: datetime) -> Decision | None:
    """None: nothing to decide yet (a running interval whose gates have not failed)."""
    if r.state != State.RUNNING:
        return None
    ended = now >= r.interval_start + timedelta(seconds=r.interval_s)
    failed = [v for v in values if v.verdict is Verdict.FAIL and (v.anytime or ended)]
    if failed:
        reason = "; ".join(v.describe() for v in failed)
        return Decision("rollback", State.ROLLED_BACK, r.step, 0.0, 0, now, reason)
    if not ended:
        return None
    verdict = overall(values)
    if verdict is Verdict.WAIT:
        waiting = ", ".join(v.name for v in values if v.verdict is Verdict.WAIT and v.required)
        reason = f"undecided: {waiting}"
        return Decision("wait", State.RUNNING, r.step, r.share, r.passes, now, reason)
    passes = r.passes + 1
    if r.mode == Mode.SHADOW or passes < r.passes_needed:
        reason = f"{passes}/{r.passes_needed} passing intervals"
        if r.mode == Mode.SHADOW and passes >= r.passes_needed:
            reason += "; ready to promote"
        return Decision("pass", State.RUNNING, r.step, r.share, passes, now, reason)
    if r.step + 1 < len(r.steps):
        share = r.steps[r.step + 1] / 100
        reason = f"{passes} passing intervals at {r.share:.0%}"
        return Decision("advance", State.RUNNING, r.step + 1, share, 0, now, reason)
    reason = f"{passes} passing intervals at {r.share:.0%}"
    return Decision("promote", State.PROMOTED, r.step, 1.0, passes, now, reason)
