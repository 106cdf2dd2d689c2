"""The engine's step clock alone: each step metered once with its own duration, a step
without tokens ended by the loop's next turn, a step cut short by a stop forgotten."""

from __future__ import annotations

import time

from worker.execution.generative.step_clock import StepClock


class Meter:
    def __init__(self) -> None:
        self.steps: list[tuple[float, int]] = []
        self.preemptions = 0

    def step(self, seconds: float, sequences: int) -> None:
        self.steps.append((seconds, sequences))

    def preempted(self) -> None:
        self.preemptions += 1


def test_steps_are_metered_once_each_as_they_end() -> None:
    clock, meter = StepClock(), Meter()
    clock.meter = meter
    began = time.monotonic()
    clock.begin(began, 3)
    ended = clock.end()  # the router hands out the step's tokens
    clock.settle()  # the loop's next turn: nothing left open
    assert meter.steps == [(ended - began, 3)]

    clock.begin(time.monotonic(), 1)  # a slice of a long prompt: no tokens, no end()
    clock.settle()
    clock.end()  # no step under way: nothing more to meter
    assert [n for _, n in meter.steps] == [3, 1] and clock.steps == 2

    clock.begin(time.monotonic() - 60, 2)  # the loop stopped inside this step
    clock.drop()
    clock.settle()
    clock.preempt()
    assert len(meter.steps) == 2 and meter.preemptions == clock.preempted == 1
