"""One row per model of a registry: where it is now (tier), what it holds there, when it
last ran. ``inferlane models list`` prints these rows, and a running worker serves its
own at ``/models.json``, so the command can show a worker's live state."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from worker.models.registry import ModelRegistry
from worker.models.tiers import Tier


@dataclass(frozen=True, slots=True)
class ModelRow:
    name: str  # a candidate version: "name@version"
    version: str
    format: str
    tier: str  # device, host or disk
    bytes: int  # what it takes on its tier: device or host memory, or its files on disk
    last_used_s: float | None  # epoch seconds; None: not run since this process started


def model_rows(registry: ModelRegistry) -> list[ModelRow]:
    """Blocking (it reads the sizes of files on disk): call it off the event loop."""
    placed = registry.placements()
    rows = []
    for name in [*registry.names(), *sorted(registry.candidates())]:
        spec = registry.spec(name)
        place = placed.get(name)
        if place is None:
            tier, size, used = Tier.DISK, _file_bytes(spec.path), None
        elif place.tier is Tier.DEVICE:
            tier, size, used = place.tier, place.device_bytes, place.last_used_s
        else:
            tier, size, used = place.tier, place.host_bytes, place.last_used_s
        rows.append(ModelRow(name, spec.version, spec.format, tier.value, size, used))
    return rows


def _file_bytes(path: Path) -> int:
    files = path.rglob("*") if path.is_dir() else [path]
    return sum(f.stat().st_size for f in files if f.is_file())
