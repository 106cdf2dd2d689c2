"""The tier decider: pure LRU placement over device, host and disk, with byte budgets.

It takes what each tier holds (least recently used first) and the budgets, and returns
the moves that make room; loading, moving and freeing memory live in ``store.py``.
Tiers are exclusive: a model is on the device, or on the host, or only on disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum


class Tier(StrEnum):
    DEVICE = "device"  # loaded and warmed, ready to run (on a CPU-only machine: in RAM)
    HOST = "host"  # weights in host memory, back on the device without reading disk
    DISK = "disk"  # only the files


@dataclass(frozen=True, slots=True)
class Resident:
    """A model held in a tier, with what it costs on each (measured, or estimated)."""

    name: str
    device_bytes: int
    host_bytes: int


@dataclass(frozen=True, slots=True)
class Budgets:
    device_bytes: int
    host_bytes: int


@dataclass(frozen=True, slots=True)
class View:
    """Tier contents, least recently used first."""

    device: tuple[Resident, ...] = ()
    host: tuple[Resident, ...] = ()

    def tier_of(self, name: str) -> Tier:
        if any(r.name == name for r in self.device):
            return Tier.DEVICE
        if any(r.name == name for r in self.host):
            return Tier.HOST
        return Tier.DISK


@dataclass(frozen=True, slots=True)
class Move:
    name: str
    source: Tier
    target: Tier  # DISK: free it


def plan_use(view: View, want: Resident, budgets: Budgets) -> list[Move]:
    """Moves that put ``want`` on the device: evictions first, then its promotion or load.

    A model larger than the whole device budget still loads (alone): refusing it would
    fail its requests for good, which is worse than a tier over budget.
    """
    source = view.tier_of(want.name)
    if source is Tier.DEVICE:
        return []
    device = (*view.device, want)
    host = tuple(r for r in view.host if r.name != want.name)
    return [*fit(View(device, host), budgets, keep=want.name), Move(want.name, source, Tier.DEVICE)]


def fit(view: View, budgets: Budgets, keep: str | None = None) -> list[Move]:
    """Moves that bring both tiers within budget: device LRU → host (when it fits there),
    host LRU → disk. ``keep`` is never moved (the model being served)."""
    moves: list[Move] = []
    device = list(view.device)
    host = list(view.host)
    while _used(device, Tier.DEVICE) > budgets.device_bytes:
        victim = _lru_except(device, keep)
        if victim is None:
            break
        device.remove(victim)
        if victim.host_bytes > budgets.host_bytes:
            moves.append(Move(victim.name, Tier.DEVICE, Tier.DISK))
            continue
        moves += _drop_host(host, budgets.host_bytes - victim.host_bytes)
        host.append(victim)  # demoted: more recent than anything already on the host
        moves.append(Move(victim.name, Tier.DEVICE, Tier.HOST))
    moves += _drop_host(host, budgets.host_bytes)
    return moves


def plan_park(view: View, parked: Resident, budgets: Budgets) -> list[Move]:
    """Place a model loaded without a request (a background retry) on the host, if it
    fits in free host memory; it never pushes out a model that was used."""
    if _used(view.host, Tier.HOST) + parked.host_bytes > budgets.host_bytes:
        return []
    return [Move(parked.name, Tier.DISK, Tier.HOST)]


def _drop_host(host: list[Resident], limit_bytes: int) -> list[Move]:
    moves = []
    while host and _used(host, Tier.HOST) > limit_bytes:
        victim = host.pop(0)
        moves.append(Move(victim.name, Tier.HOST, Tier.DISK))
    return moves


def _used(residents: Sequence[Resident], tier: Tier) -> int:
    if tier is Tier.DEVICE:
        return sum(r.device_bytes for r in residents)
    return sum(r.host_bytes for r in residents)


def _lru_except(residents: Sequence[Resident], keep: str | None) -> Resident | None:
    return next((r for r in residents if r.name != keep), None)


def apply(view: View, moves: Sequence[Move], resident: Resident) -> View:
    """The view after ``moves``; ``resident`` gives the size of the model that arrives."""
    device, host = list(view.device), list(view.host)
    known = {r.name: r for r in (*device, *host)}
    for move in moves:
        r = known.get(move.name, resident)
        device = [d for d in device if d.name != move.name]
        host = [h for h in host if h.name != move.name]
        if move.target is Tier.DEVICE:
            device.append(r)
        elif move.target is Tier.HOST:
            host.append(r)
    return View(tuple(device), tuple(host))


def touch(view: View, name: str) -> View:
    """``name`` becomes the most recently used of its tier."""
    for attr in ("device", "host"):
        tier: tuple[Resident, ...] = getattr(view, attr)
        hit = [r for r in tier if r.name == name]
        if hit:
            rest = tuple(r for r in tier if r.name != name)
            return replace(view, **{attr: (*rest, hit[0])})
    return view
