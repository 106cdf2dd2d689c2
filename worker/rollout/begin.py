"""Starting a rollout: the row every worker follows, from a registry candidate and a plan."""

from __future__ import annotations

from storage.rollouts import RolloutRecord, RolloutStore
from worker.models.specs import CandidateSpec, ModelSpec
from worker.settings.rollout_plan import Mode, RolloutPlan


def begin(
    store: RolloutStore,
    primary: ModelSpec,
    candidate: CandidateSpec,
    plan: RolloutPlan,
    *,
    reason: str | None = None,
) -> RolloutRecord:
    """Raises ``RolloutConflict`` if the model has a running rollout."""
    return store.start(
        model=primary.name,
        candidate_version=candidate.version,
        primary_version=primary.version,
        mode=plan.mode.value,
        steps=list(plan.steps),
        share=plan.steps[0] / 100 if plan.mode == Mode.CANARY else 0.0,
        sample=plan.sample,
        interval_s=plan.interval_s,
        passes_needed=plan.passes,
        gates=plan.gates.model_dump(),
        reason=reason,
    )
