"""Batcher.plan: pure policy over lanes and a clock reading."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pipeline_factories import pending

from consumers.contract import Priority
from worker.base.pending import Pending
from worker.scheduling.batcher import Batcher, BatchPlan
from worker.scheduling.lanes import LANE_ORDER, Lanes
from worker.settings import BatchConfig

MAX_WAIT = 0.010
CONFIG = BatchConfig(max_wait_ms=MAX_WAIT * 1000, swap_patience_ms=0)
HIGH, NORMAL, LOW = Priority.HIGH, Priority.NORMAL, Priority.LOW
LANES = [HIGH, NORMAL, LOW]


def make(limit: int = 4, *, grouped: bool = False, single_lane: bool = False):
    lanes = Lanes(capacity=100, single_lane=single_lane)
    batcher = Batcher(lanes, CONFIG, limit=lambda *_: limit, grouped=lambda _: grouped)
    return lanes, batcher


def fill(lanes: Lanes, *items: Pending) -> list[Pending]:
    for item in items:
        lanes.push(item)
    return list(items)


def test_empty_lanes_plan_nothing_and_do_not_ask_to_wake() -> None:
    _, batcher = make()
    plan = batcher.plan(1.0, idle=LANE_ORDER)
    assert plan == BatchPlan()


def test_a_partial_batch_waits_until_max_wait_since_its_oldest_item() -> None:
    lanes, batcher = make(limit=4)
    fill(lanes, pending(received_s=1.000), pending(received_s=1.004))

    plan = batcher.plan(1.005, idle=())
    assert plan.batch is None and plan.expired == []
    assert plan.wake_at_s == 1.000 + MAX_WAIT
    assert len(lanes) == 2

    plan = batcher.plan(1.000 + MAX_WAIT, idle=())
    assert plan.batch is not None and len(plan.batch) == 2
    assert plan.batch.formed_s == 1.000 + MAX_WAIT
    assert len(lanes) == 0


def test_a_full_batch_closes_at_once() -> None:
    lanes, batcher = make(limit=3)
    items = fill(lanes, *[pending(received_s=1.0) for _ in range(5)])
    plan = batcher.plan(1.0, idle=())
    assert plan.batch is not None
    assert plan.batch.items == items[:3]  # oldest first, capped at the limit
    assert len(lanes) == 2


def test_an_idle_device_takes_a_single_item_without_waiting() -> None:
    lanes, batcher = make(limit=8)
    (item,) = fill(lanes, pending(received_s=1.0))
    plan = batcher.plan(1.0, idle=LANE_ORDER)
    assert plan.batch is not None and plan.batch.items == [item]
    assert plan.batch.model == "m"


def test_only_a_lane_whose_own_compute_is_idle_skips_the_wait() -> None:
    lanes, batcher = make(limit=4)
    low = fill(lanes, pending("bulk", lane=LOW, received_s=1.0))  # no rider: another model
    plan = batcher.plan(1.001, idle=[HIGH])  # the low lane's compute is busy: it waits
    assert plan.batch is None and plan.wake_at_s == 1.0 + MAX_WAIT
    high = fill(lanes, pending(lane=HIGH, received_s=1.001))
    plan = batcher.plan(1.001, idle=[HIGH])
    assert plan.batch is not None and plan.batch.items == high
    plan = batcher.plan(1.002, idle=[HIGH, LOW])
    assert plan.batch is not None and plan.batch.items == low


def test_a_filling_high_batch_blocks_a_full_low_batch() -> None:
    lanes, batcher = make(limit=2)
    fill(lanes, pending("a", lane=HIGH, received_s=1.0))
    fill(lanes, *[pending("b", lane=LOW, received_s=0.5) for _ in range(4)])

    plan = batcher.plan(1.001, idle=())

    assert plan.batch is None
    assert plan.wake_at_s == 1.0 + MAX_WAIT
    assert len(lanes) == 5


def test_the_highest_ready_lane_is_served_first() -> None:
    lanes, batcher = make(limit=2)
    low = fill(lanes, pending("b", lane=LOW, received_s=0.0))
    high = fill(lanes, pending("a", lane=HIGH, received_s=5.0))
    plan = batcher.plan(5.0, idle=LANE_ORDER)
    assert plan.batch is not None and plan.batch.items == high
    plan = batcher.plan(5.0, idle=LANE_ORDER)
    assert plan.batch is not None and plan.batch.items == low


def test_same_model_items_from_lower_lanes_fill_the_remaining_room() -> None:
    lanes, batcher = make(limit=4)
    high = fill(lanes, *[pending("a", lane=HIGH, received_s=2.0) for _ in range(2)])
    normal = fill(lanes, *[pending("a", lane=NORMAL, received_s=1.0) for _ in range(3)])
    other = fill(lanes, pending("b", lane=NORMAL, received_s=0.0))
    low = fill(lanes, pending("a", lane=LOW, received_s=0.0))

    plan = batcher.plan(2.0, idle=LANE_ORDER)

    assert plan.batch is not None
    assert plan.batch.model == "a"
    assert plan.batch.items == high + normal[:2]  # higher lanes first, then FIFO
    assert len(lanes) == 3
    assert lanes.lane_for(NORMAL).count("b") == 1 and other[0] not in plan.batch.items
    assert low[0] not in plan.batch.items


def test_the_oldest_model_in_a_lane_goes_first_and_a_batch_never_mixes_models() -> None:
    lanes, batcher = make(limit=10)
    fill(
        lanes,
        pending("b", received_s=2.0),
        pending("a", received_s=1.0),
        pending("b", received_s=3.0),
    )
    first = batcher.plan(3.0, idle=LANE_ORDER).batch
    second = batcher.plan(3.0, idle=LANE_ORDER).batch
    assert first is not None and second is not None
    assert (first.model, len(first)) == ("a", 1)
    assert (second.model, len(second)) == ("b", 2)
    assert {p.model for p in second.items} == {"b"}


def test_expired_items_are_split_out_of_the_batch() -> None:
    lanes, batcher = make(limit=4)
    live = pending(received_s=1.0, deadline_s=9.0)
    dead = pending(received_s=1.0, deadline_s=2.0)
    at_deadline = pending(received_s=1.0, deadline_s=3.0)
    forever = pending(received_s=1.0)
    fill(lanes, live, dead, at_deadline, forever)

    plan = batcher.plan(3.0, idle=LANE_ORDER)

    assert plan.batch is not None and plan.batch.items == [live, forever]
    assert plan.expired == [dead, at_deadline]  # a deadline equal to now has passed


def test_expired_items_leave_in_the_sweep_before_the_batch_forms() -> None:
    lanes, batcher = make(limit=2)
    dead = fill(
        lanes, pending(received_s=1.0, deadline_s=1.5), pending(received_s=1.0, deadline_s=1.5)
    )
    (live,) = fill(lanes, pending(received_s=1.0))

    plan = batcher.plan(2.0, idle=LANE_ORDER)

    assert plan.expired == dead
    assert plan.batch is not None and plan.batch.items == [live]
    assert len(lanes) == 0


def test_grouped_models_batch_by_similar_cost() -> None:
    lanes, batcher = make(limit=2, grouped=True)
    fill(lanes, *[pending(cost=c, received_s=i) for i, c in enumerate([10, 90, 80, 11])])
    plan = batcher.plan(10.0, idle=LANE_ORDER)
    assert plan.batch is not None
    assert [p.cost for p in plan.batch.items] == [10, 11]


def test_the_cap_is_per_model() -> None:
    lanes = Lanes(capacity=100)
    caps = {"small": 1, "big": 5}
    batcher = Batcher(lanes, CONFIG, limit=lambda m, _: caps[m], grouped=lambda _: False)
    fill(lanes, *[pending("small", received_s=0.0) for _ in range(3)])
    plan = batcher.plan(0.0, idle=())  # full at one item: closes at once
    assert plan.batch is not None and len(plan.batch) == 1


MODELS = st.sampled_from(["a", "b", "c"])
ITEMS = st.lists(
    st.tuples(
        st.sampled_from([HIGH, NORMAL, LOW]),
        MODELS,
        st.floats(0.0, 1.0),  # received_s
        st.none() | st.floats(0.0, 2.0),  # deadline_s
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None, database=None)
@given(ITEMS, st.floats(0.0, 2.0), st.booleans(), st.integers(1, 6), st.booleans())
def test_plan_invariants(
    specs: list[tuple[Priority, str, float, float | None]],
    now_s: float,
    device_idle: bool,
    limit: int,
    grouped: bool,
) -> None:
    lanes, batcher = make(limit=limit, grouped=grouped)
    items = fill(
        lanes,
        *[pending(m, lane=p, received_s=r, deadline_s=d, cost=int(r * 10)) for p, m, r, d in specs],
    )
    dead = [p for p in items if p.deadline_s is not None and p.deadline_s <= now_s]
    alive = [p for p in items if p not in dead]
    first = next((p.lane for p in sorted(alive, key=lambda p: LANES.index(p.lane))), None)
    # FIFO per model: its first item still waiting; ties on age go to the model that
    # reached the lane first (expired items included: they made its queue).
    order = list(dict.fromkeys(p.model for p in items if p.lane == first))
    queue_heads = [
        next((p for p in alive if p.lane == first and p.model == m), None) for m in order
    ]
    head = min((p for p in queue_heads if p is not None), key=lambda p: p.received_s, default=None)
    ready = head is not None and (
        device_idle
        or now_s >= head.received_s + MAX_WAIT
        or sum(p.lane == head.lane and p.model == head.model for p in alive) >= limit
    )

    plan = batcher.plan(now_s, idle=LANE_ORDER if device_idle else ())

    batch = plan.batch.items if plan.batch else []
    assert len(batch) + len(plan.expired) + len(lanes) == len(items)  # nothing lost
    assert len({id(p) for p in batch + plan.expired}) == len(batch) + len(plan.expired)
    assert sorted(map(id, plan.expired)) == sorted(map(id, dead))  # every lane swept
    assert len(batch) <= limit
    deadlines = [p.deadline_s for p in alive if p.deadline_s is not None and p not in batch]
    if plan.batch is not None:
        assert len(plan.batch) >= 1
        assert {p.model for p in plan.batch.items} == {plan.batch.model}
    if head is None:
        assert plan.batch is None and plan.wake_at_s is None
        return
    if not ready:  # strict priority: the first non-empty lane decides, and it waits
        assert batch == []
        assert plan.wake_at_s == min([head.received_s + MAX_WAIT, *deadlines])
    else:
        assert batch and {p.model for p in batch} == {head.model}
        assert head in batch


def test_a_model_on_the_device_goes_before_an_older_request_for_a_cold_one() -> None:
    lanes = Lanes(capacity=100)
    batcher = Batcher(
        lanes,
        BatchConfig(max_wait_ms=MAX_WAIT * 1000, swap_patience_ms=200),
        limit=lambda *_: 4,
        grouped=lambda _: False,
        resident=lambda model: model == "warm",
    )
    fill(lanes, pending("cold", received_s=1.00), pending("warm", received_s=1.01))

    first = batcher.plan(1.05, idle=LANE_ORDER).batch
    assert first is not None and first.model == "warm"  # no swap for the interleaved one
    second = batcher.plan(1.06, idle=LANE_ORDER).batch
    assert second is not None and second.model == "cold"  # nothing warm left: it runs


def test_a_cold_model_waits_no_longer_than_the_patience() -> None:
    lanes = Lanes(capacity=100)
    batcher = Batcher(
        lanes,
        BatchConfig(max_wait_ms=MAX_WAIT * 1000, swap_patience_ms=200),
        limit=lambda *_: 4,
        grouped=lambda _: False,
        resident=lambda model: model == "warm",
    )
    fill(lanes, pending("cold", received_s=1.00), pending("warm", received_s=1.01))

    plan = batcher.plan(1.25, idle=LANE_ORDER)  # the cold head waited 250 ms > 200 ms
    assert plan.batch is not None and plan.batch.model == "cold"


def test_only_the_open_lanes_form_a_batch() -> None:
    lanes, batcher = make(limit=4)
    fill(lanes, pending(lane=NORMAL, received_s=0.5), pending(lane=LOW, received_s=0.5))

    plan = batcher.plan(1.0, idle=(), lanes=[HIGH])  # the rest are full
    assert plan.batch is None and len(lanes) == 2

    (high,) = fill(lanes, pending(lane=HIGH, received_s=1.0))
    plan = batcher.plan(1.0 + MAX_WAIT, idle=(), lanes=[HIGH])
    assert plan.batch is not None and plan.batch.lane == HIGH
    assert plan.batch.items[0] is high


def test_a_batch_records_the_lane_it_was_formed_from() -> None:
    lanes, batcher = make(limit=4)
    fill(lanes, pending(lane=LOW, received_s=0.5))
    plan = batcher.plan(1.0, idle=LANE_ORDER)
    assert plan.batch is not None and plan.batch.lane == LOW

    # One FIFO lane: a high request inside still makes a normal-lane batch, so nothing
    # downstream (the executor's queue) reorders the baseline.
    lanes, batcher = make(limit=4, single_lane=True)
    fill(lanes, pending(lane=HIGH, received_s=0.5))
    plan = batcher.plan(1.0, idle=LANE_ORDER)
    assert plan.batch is not None and plan.batch.lane == NORMAL
