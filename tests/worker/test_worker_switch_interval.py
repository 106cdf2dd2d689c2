"""The switch interval: short while urgent records are held, exactly restored after."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from worker.switch_interval import SwitchInterval


@pytest.fixture(autouse=True)
def known_interval() -> Iterator[float]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.004)
    yield 0.004
    sys.setswitchinterval(before)


def test_held_records_shorten_the_interval_until_the_last_one_leaves() -> None:
    switch = SwitchInterval(0.0005)
    switch.enter(3)
    assert sys.getswitchinterval() == pytest.approx(0.0005, abs=2e-6)
    switch.leave(2)
    assert sys.getswitchinterval() == pytest.approx(0.0005, abs=2e-6)
    switch.leave(1)
    assert sys.getswitchinterval() == pytest.approx(0.004, abs=2e-6)
    assert switch.held == 0


def test_the_interval_comes_back_only_when_no_worker_in_the_process_holds_any() -> None:
    first, second = SwitchInterval(0.0005), SwitchInterval(0.001)
    first.enter(1)
    second.enter(1)
    first.leave(1)
    assert sys.getswitchinterval() == pytest.approx(0.0005, abs=2e-6)  # the second still holds
    second.close()
    assert sys.getswitchinterval() == pytest.approx(0.004, abs=2e-6)


def test_an_interval_already_shorter_is_kept() -> None:
    sys.setswitchinterval(0.0002)
    switch = SwitchInterval(0.0005)
    switch.enter(1)
    assert sys.getswitchinterval() == pytest.approx(0.0002, abs=2e-6)
    switch.leave(1)
    assert sys.getswitchinterval() == pytest.approx(0.0002, abs=2e-6)


def test_off_leaves_the_interval_alone() -> None:
    switch = SwitchInterval(None)
    switch.enter(5)
    assert switch.held == 0
    assert sys.getswitchinterval() == pytest.approx(0.004, abs=2e-6)


def test_leaving_more_than_is_held_ends_the_hold_without_failing() -> None:
    switch = SwitchInterval(0.0005)
    switch.enter(1)
    switch.leave(2)
    assert switch.held == 0
    assert sys.getswitchinterval() == pytest.approx(0.004, abs=2e-6)
    switch.enter(1)  # and a later hold starts afresh
    assert sys.getswitchinterval() == pytest.approx(0.0005, abs=2e-6)
    switch.close()
