"""Coalesced offset commits: at most one per interval, each with the newest offsets; a
failed commit is retried unless a newer offset replaced it; forgotten partitions are
not committed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from consumers.offsets import TopicPartitionKey
from worker.delivery.commits import CoalescedCommits

A: TopicPartitionKey = ("t", 0)
B: TopicPartitionKey = ("t", 1)


class Recorder:
    """The group's commit, as the coalescer sees it: records each call; can fail."""

    def __init__(self) -> None:
        self.calls: list[dict[TopicPartitionKey, int]] = []
        self.fail_next = False

    async def __call__(self, offsets: dict[TopicPartitionKey, int]) -> None:
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("broker away")
        self.calls.append(dict(offsets))


@contextlib.asynccontextmanager
async def running(commits: CoalescedCommits):  # type: ignore[no-untyped-def]
    task = asyncio.create_task(commits.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_offsets_added_within_an_interval_go_in_one_commit_with_the_newest() -> None:
    commit = Recorder()
    commits = CoalescedCommits(commit, interval_s=0.3)
    async with running(commits):
        commits.add({A: 1})
        await asyncio.sleep(0.05)  # the first goes at once
        for offset in range(2, 40):
            commits.add({A: offset, B: offset // 2})
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.4)
    assert commit.calls == [{A: 1}, {A: 39, B: 19}]


async def test_a_failed_commit_is_retried_unless_a_newer_offset_replaced_it() -> None:
    commit = Recorder()
    commits = CoalescedCommits(commit, interval_s=0.05)
    commit.fail_next = True
    async with running(commits):
        commits.add({A: 5, B: 7})
        await asyncio.sleep(0.02)  # the failed attempt is over; the retry waits
        commits.add({A: 9})
        await asyncio.sleep(0.15)
    assert commit.calls == [{A: 9, B: 7}]


async def test_flush_commits_now_and_forgotten_partitions_are_dropped() -> None:
    commit = Recorder()
    commits = CoalescedCommits(commit, interval_s=60)
    commits.add({A: 3, B: 4})
    commits.forget([B])
    await commits.flush()
    await commits.flush()  # nothing pending: no call
    assert commit.calls == [{A: 3}]


async def test_a_commit_cancelled_midway_leaves_its_offsets_for_the_next_flush() -> None:
    started = asyncio.Event()
    calls: list[dict[TopicPartitionKey, int]] = []

    async def first_hangs(offsets: dict[TopicPartitionKey, int]) -> None:
        calls.append(dict(offsets))
        if len(calls) == 1:
            started.set()
            await asyncio.sleep(10)

    commits = CoalescedCommits(first_hangs, interval_s=60)
    commits.add({A: 2})
    flush = asyncio.create_task(commits.flush())
    await started.wait()
    flush.cancel()  # what stop() does to the commit task
    with pytest.raises(asyncio.CancelledError):
        await flush
    await commits.flush()
    assert calls == [{A: 2}, {A: 2}]
