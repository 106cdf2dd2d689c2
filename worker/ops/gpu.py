"""GPU memory and utilization from NVML, when a driver is present; otherwise nothing."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    memory_used_bytes: int
    memory_total_bytes: int
    utilization_ratio: float  # 0..1, over NVML's last sample period


class Nvml:
    """Reads every visible GPU; ``available`` is False (and ``read`` empty) without NVML."""

    def __init__(self) -> None:
        self._handles: list[object] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # no driver, no library, no device: no GPU series
            log.debug("NVML unavailable: %s", exc)

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def read(self) -> list[GpuReading]:
        import pynvml

        readings = []
        for i, handle in enumerate(self._handles):
            try:
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                busy = pynvml.nvmlDeviceGetUtilizationRates(handle)
            except pynvml.NVMLError as exc:
                log.warning("NVML read of GPU %d failed: %s", i, exc)
                continue
            readings.append(GpuReading(i, int(memory.used), int(memory.total), busy.gpu / 100))
        return readings
