"""One engine's decoding steps, counted and timed on the engine's thread.

A step begins when the scheduler has picked its sequences (with the stamp it took on
entry) and ends when the router hands out the step's tokens: that stamp is the time
of those tokens, for TTFT and for the first chunk's delay. A step that hands out no
token (a slice of a long prompt) ends at the loop's next turn. Two ``monotonic()``
calls a step, whatever the number of tokens; the meter (a model's metrics) is told
of each step as it ends.
"""

from __future__ import annotations

import time
from typing import Protocol


class StepMeter(Protocol):
    """Where a model's steps are exported (called on the engine's thread)."""

    def step(self, seconds: float, sequences: int) -> None: ...

    def preempted(self) -> None: ...


class StepClock:
    def __init__(self) -> None:
        self.meter: StepMeter | None = None  # set by the stage that serves the engine
        self.steps = 0  # steps begun so far
        self.preempted = 0  # sequences preempted so far
        self._began_s: float | None = None  # the step under way
        self._sequences = 0

    def begin(self, began_s: float, sequences: int) -> None:
        self.steps += 1
        self._began_s = began_s
        self._sequences = sequences

    def end(self) -> float:
        """End the step under way; returns the time (monotonic)."""
        now = time.monotonic()
        began = self._began_s
        if began is not None:
            self._began_s = None
            if self.meter is not None:
                self.meter.step(now - began, self._sequences)
        return now

    def settle(self) -> None:
        """End a step that handed out no token (the loop's next turn calls this)."""
        if self._began_s is not None:
            self.end()

    def drop(self) -> None:
        """Forget a step the last generation loop left open (it stopped or died in it)."""
        self._began_s = None

    def preempt(self) -> None:
        self.preempted += 1
        if self.meter is not None:
            self.meter.preempted()
