"""The lease that keeps an evicted module alive until the batches on it finish."""

from __future__ import annotations

import threading

from worker.models.model import Lease


def test_release_waits_for_every_forward_pass_in_progress() -> None:
    lease, freed = Lease(), []
    with lease.held():
        with lease.held():
            lease.release(lambda: freed.append(1))
        assert freed == []  # one pass still runs
    assert freed == [1]
    lease.release(lambda: freed.append(2))  # idle: at once
    assert freed == [1, 2]


def test_wait_idle_returns_when_the_running_pass_ends() -> None:
    lease, inside, done = Lease(), threading.Event(), threading.Event()

    def forward() -> None:
        with lease.held():
            inside.set()
            assert done.wait(30)

    thread = threading.Thread(target=forward)
    thread.start()
    assert inside.wait(30)
    waiter = threading.Thread(target=lease.wait_idle)
    waiter.start()
    waiter.join(0.05)
    assert waiter.is_alive()  # still inside the pass
    done.set()
    waiter.join(30)
    thread.join(30)
    assert not waiter.is_alive()
