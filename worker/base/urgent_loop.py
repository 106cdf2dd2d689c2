"""Urgent work first on the event loop: the high lane's hops jump the loop's queue.

asyncio runs ready callbacks first in, first out, so under a bulk backlog each hop of a
high record (its fetch response read, parsed, admitted, its batch's completion, its
produce) waits for every bulk callback queued before it, several milliseconds each.
``install`` gives the running loop a ready queue that runs the callbacks of urgent
contexts before the others (in order among themselves). A callback is urgent when the
context it was scheduled in says so: tasks started with ``urgent_context()`` (and every
task, connection and timer they create, which inherit it), or a ``Boost`` that is on (a
shared task, such as the dispatcher, while it carries urgent work).

After ``FAIR_AFTER`` urgent callbacks in a row, one waiting ordinary callback runs, so
a flood of urgent work slows bulk work down but never stops it.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from typing import Any

FAIR_AFTER = 32


class Boost:
    """An urgency that can be switched: on while its holder carries urgent work."""

    __slots__ = ("on",)

    def __init__(self, on: bool = False) -> None:
        self.on = on


_ALWAYS = Boost(on=True)
_URGENCY: contextvars.ContextVar[Boost | None] = contextvars.ContextVar(
    "inferlane_urgency", default=None
)


def urgent_context() -> contextvars.Context:
    """A copy of the current context in which everything scheduled is urgent (pass it
    as ``context=`` to ``create_task`` or ``call_soon``)."""
    context = contextvars.copy_context()
    context.run(_URGENCY.set, _ALWAYS)
    return context


def boost_current() -> Boost:
    """A switch, off for now, for the urgency of the calling task (and of what it
    schedules from here on)."""
    boost = Boost()
    _URGENCY.set(boost)
    return boost


def is_urgent() -> bool:
    """Whether the code running now runs in an urgent context."""
    urgency = _URGENCY.get()
    return urgency is not None and urgency.on


class UrgentFirst(collections.deque[Any]):
    """The loop's ready queue (``collections.deque`` of handles): ``append`` routes urgent
    handles to a queue of their own, which ``popleft`` serves first."""

    def __init__(self, handles: collections.deque[Any]) -> None:
        super().__init__(handles)
        self._urgent: collections.deque[Any] = collections.deque()
        self._in_a_row = 0

    def append(self, handle: Any) -> None:
        urgency = handle._context.get(_URGENCY)
        if urgency is not None and urgency.on:
            self._urgent.append(handle)
        else:
            super().append(handle)

    def popleft(self) -> Any:
        if self._urgent and (self._in_a_row < FAIR_AFTER or not super().__len__()):
            self._in_a_row += 1
            return self._urgent.popleft()
        self._in_a_row = 0
        return super().popleft()

    def __len__(self) -> int:
        return super().__len__() + len(self._urgent)

    def __bool__(self) -> bool:
        return bool(self._urgent) or super().__len__() > 0

    def clear(self) -> None:
        self._urgent.clear()
        super().clear()


def install(loop: asyncio.AbstractEventLoop) -> bool:
    """Give ``loop`` the urgent-first ready queue; False (nothing changed) for a loop
    that is not asyncio's own (uvloop keeps its queue in C)."""
    ready = getattr(loop, "_ready", None)
    if isinstance(ready, UrgentFirst):
        return True
    if type(ready) is not collections.deque:
        return False
    loop._ready = UrgentFirst(ready)  # type: ignore[attr-defined]
    return True
