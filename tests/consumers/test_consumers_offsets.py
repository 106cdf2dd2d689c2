"""OffsetTracker: commit only the contiguous prefix of finished records, per partition."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from consumers.offsets import OffsetTracker

TP = ("inferlane.requests", 0)
OTHER = ("inferlane.requests", 1)


def tracker_with(tp: tuple[str, int], offsets: list[int]) -> OffsetTracker:
    tracker = OffsetTracker()
    for offset in offsets:
        tracker.started(tp, offset)
    return tracker


def test_nothing_to_commit_before_anything_finishes() -> None:
    tracker = tracker_with(TP, [0, 1, 2])
    assert tracker.take_commits() == {}
    assert tracker.in_flight() == 3


def test_an_out_of_order_finish_waits_for_the_earlier_offsets() -> None:
    tracker = tracker_with(TP, [10, 11, 12, 13])

    tracker.finished(TP, 12)
    assert tracker.take_commits() == {}

    tracker.finished(TP, 10)
    assert tracker.take_commits() == {TP: 11}

    tracker.finished(TP, 11)  # fills the gap: 11 and 12 are both done
    assert tracker.take_commits() == {TP: 13}
    assert tracker.in_flight() == 1

    tracker.finished(TP, 13)
    assert tracker.take_commits() == {TP: 14}
    assert tracker.in_flight() == 0


def test_take_commits_returns_only_positions_that_moved() -> None:
    tracker = tracker_with(TP, [0, 1])
    for offset in [5, 6]:
        tracker.started(OTHER, offset)

    tracker.finished(TP, 0)
    tracker.finished(OTHER, 5)
    assert tracker.take_commits() == {TP: 1, OTHER: 6}
    assert tracker.take_commits() == {}

    tracker.finished(OTHER, 6)
    assert tracker.take_commits() == {OTHER: 7}


def test_offset_gaps_from_compaction_commit_past_the_last_finished() -> None:
    tracker = tracker_with(TP, [3, 7, 20])
    tracker.finished(TP, 7)
    tracker.finished(TP, 3)
    assert tracker.take_commits() == {TP: 8}
    tracker.finished(TP, 20)
    assert tracker.take_commits() == {TP: 21}


def test_finishing_twice_changes_nothing() -> None:
    tracker = tracker_with(TP, [0, 1, 2])
    tracker.finished(TP, 0)
    assert tracker.take_commits() == {TP: 1}
    tracker.finished(TP, 0)
    assert tracker.take_commits() == {}
    assert tracker.in_flight() == 2


def test_unknown_partitions_and_offsets_below_the_head_are_ignored() -> None:
    tracker = tracker_with(TP, [5, 6])
    tracker.finished(OTHER, 5)  # never assigned here
    tracker.finished(TP, 2)  # before anything this tracker handed out
    assert tracker.take_commits() == {}
    assert tracker.in_flight() == 2


def test_forget_drops_a_partition_and_its_pending_positions() -> None:
    tracker = tracker_with(TP, [0, 1])
    tracker.started(OTHER, 0)
    tracker.finished(TP, 0)

    tracker.forget({TP, ("never", 9)})

    assert tracker.take_commits() == {}  # the moved TP position went with it
    assert tracker.in_flight() == 1
    tracker.finished(TP, 1)  # a late finish of a revoked partition
    assert tracker.take_commits() == {}
    tracker.finished(OTHER, 0)
    assert tracker.take_commits() == {OTHER: 1}


def test_a_reassigned_partition_starts_fresh() -> None:
    tracker = tracker_with(TP, [0])
    tracker.finished(TP, 0)
    assert tracker.take_commits() == {TP: 1}
    tracker.forget({TP})

    tracker.started(TP, 1)
    tracker.finished(TP, 1)
    assert tracker.take_commits() == {TP: 2}


def test_an_offset_finished_before_it_was_started_does_not_count() -> None:
    tracker = tracker_with(TP, [0, 1])
    tracker.finished(TP, 3)  # unknown: 3 was never handed out
    tracker.finished(TP, 0)
    tracker.finished(TP, 1)
    assert tracker.take_commits() == {TP: 2}

    tracker.started(TP, 2)
    tracker.started(TP, 3)
    tracker.finished(TP, 2)
    # 3 is in flight now; committing 4 would skip a record without a durable result.
    assert tracker.take_commits() == {TP: 3}


@settings(database=None)
@given(
    st.integers(min_value=0, max_value=1000),
    st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=40).flatmap(
        lambda steps: st.tuples(st.just(steps), st.permutations(range(len(steps))))
    ),
)
def test_any_finish_order_commits_at_most_the_first_unfinished_offset(
    first: int, steps_and_order: tuple[list[int], list[int]]
) -> None:
    steps, order = steps_and_order
    offsets, offset = [], first
    for step in steps:  # increasing offsets, with gaps of up to 2
        offsets.append(offset)
        offset += step
    tracker = tracker_with(TP, offsets)
    done: set[int] = set()
    position = None

    for index in order:
        tracker.finished(TP, offsets[index])
        done.add(offsets[index])
        moved = tracker.take_commits()
        unfinished = [o for o in offsets if o not in done]
        if TP in moved:
            assert position is None or moved[TP] > position  # never goes back
            position = moved[TP]
        if unfinished:
            assert position is None or position <= unfinished[0]
        # Every offset before the position is finished.
        assert all(o in done for o in offsets if position is not None and o < position)

    assert position == offsets[-1] + 1
    assert tracker.in_flight() == 0
