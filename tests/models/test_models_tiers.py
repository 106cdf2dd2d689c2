"""The tier decider on synthetic traces: it must behave as a two-level LRU."""

from __future__ import annotations

import random

import pytest

from worker.models.tiers import (
    Budgets,
    Move,
    Resident,
    Tier,
    View,
    apply,
    fit,
    plan_park,
    plan_use,
    touch,
)


def step(view: View, r: Resident, budgets: Budgets) -> tuple[View, Tier, list[Move]]:
    """One request: where the model was found, the moves, and the view afterwards."""
    found = view.tier_of(r.name)
    moves = plan_use(view, r, budgets)
    return touch(apply(view, moves, r), r.name), found, moves


def stack_distance_tier(history: list[str], name: str, device: int, host: int) -> Tier:
    """Exclusive two-level LRU with equal sizes = one LRU stack: top ``device`` entries
    on the device, the next ``host`` on the host."""
    recent: list[str] = []
    for n in reversed(history):
        if n not in recent:
            recent.append(n)
    if name not in recent:
        return Tier.DISK
    depth = recent.index(name)
    return Tier.DEVICE if depth < device else Tier.HOST if depth < device + host else Tier.DISK


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("skew", [0.0, 1.2])  # uniform, Zipf-like
def test_equal_sizes_match_the_lru_stack(seed: int, skew: float) -> None:
    rng = random.Random(seed)
    names = [f"m{i}" for i in range(8)]
    weights = [1 / (i + 1) ** skew for i in range(8)]
    budgets = Budgets(device_bytes=2 * 100, host_bytes=3 * 80)
    view, history = View(), []
    for name in rng.choices(names, weights, k=400):
        view, found, moves = step(view, Resident(name, 100, 80), budgets)
        assert found is stack_distance_tier(history, name, device=2, host=3)
        assert moves[-1:] == ([] if found is Tier.DEVICE else [Move(name, found, Tier.DEVICE)])
        history.append(name)
        assert sum(r.device_bytes for r in view.device) <= budgets.device_bytes
        assert sum(r.host_bytes for r in view.host) <= budgets.host_bytes
        placed = [r.name for r in (*view.device, *view.host)]
        assert len(set(placed)) == len(placed)  # exclusive tiers


def test_round_robin_beyond_capacity_always_misses() -> None:
    budgets = Budgets(2, 3)
    view, found_tiers = View(), []
    for i in range(80):
        view, found, _ = step(view, Resident(f"m{i % 8}", 1, 1), budgets)
        found_tiers.append(found)
    assert set(found_tiers) == {Tier.DISK}  # the classic LRU cliff: 8 models cycling, 5 slots


def test_a_big_model_pushes_out_several_and_demotes_what_fits() -> None:
    view = View(device=(Resident("a", 40, 30), Resident("b", 40, 30)), host=(Resident("c", 1, 50),))
    moves = plan_use(view, Resident("big", 70, 60), Budgets(100, 60))
    assert moves == [
        Move("c", Tier.HOST, Tier.DISK),  # least recently used of all: room for a
        Move("a", Tier.DEVICE, Tier.HOST),
        Move("b", Tier.DEVICE, Tier.HOST),
        Move("big", Tier.DISK, Tier.DEVICE),
    ]


def test_a_model_too_big_for_the_host_is_freed_not_demoted() -> None:
    view = View(device=(Resident("huge", 90, 90),))
    moves = plan_use(view, Resident("x", 20, 20), Budgets(100, 50))
    assert moves == [Move("huge", Tier.DEVICE, Tier.DISK), Move("x", Tier.DISK, Tier.DEVICE)]


def test_a_model_bigger_than_the_device_budget_loads_alone() -> None:
    view = View(device=(Resident("a", 10, 10),))
    moves = plan_use(view, Resident("big", 500, 500), Budgets(100, 100))
    assert moves == [Move("a", Tier.DEVICE, Tier.HOST), Move("big", Tier.DISK, Tier.DEVICE)]


def test_promotion_frees_its_host_room_for_the_demoted() -> None:
    view = View(device=(Resident("a", 10, 10),), host=(Resident("b", 10, 10),))
    moves = plan_use(view, Resident("b", 10, 10), Budgets(10, 10))
    assert moves == [Move("a", Tier.DEVICE, Tier.HOST), Move("b", Tier.HOST, Tier.DEVICE)]


def test_fit_after_an_underestimate_keeps_the_served_model() -> None:
    view = View(device=(Resident("old", 30, 30), Resident("new", 90, 90)))
    assert fit(view, Budgets(100, 100), keep="new") == [Move("old", Tier.DEVICE, Tier.HOST)]
    assert fit(View(device=(Resident("new", 190, 1),)), Budgets(100, 100), keep="new") == []


def test_a_background_retry_parks_only_in_free_host_memory() -> None:
    view = View(host=(Resident("a", 10, 60),))
    assert plan_park(view, Resident("r", 10, 40), Budgets(100, 100)) == [
        Move("r", Tier.DISK, Tier.HOST)
    ]
    assert plan_park(view, Resident("r", 10, 41), Budgets(100, 100)) == []
