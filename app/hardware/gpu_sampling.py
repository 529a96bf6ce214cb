"""Live NVIDIA GPU readings through NVML, for the metrics pipeline: NVML is opened once and read every tick.

Where NVML cannot start (no driver, no GPU) `open()` says so and the sampler reads nothing: a machine without a
GPU has no GPU series, never zeros. A fact one GPU does not report (power on some boards) is None.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

import pynvml

from app.hardware.nvidia import _optional

log = logging.getLogger("modeldeck.hardware")


@dataclass(frozen=True)
class GPUReading:
    """One GPU at one moment. Memory in bytes; unknown facts are None."""

    index: int
    memory_used: int
    memory_total: int
    utilization_percent: float | None
    temperature_c: float | None
    power_w: float | None
    process_memory: dict[int, int] = field(default_factory=dict)  # pid -> bytes on this GPU


class NvmlSampler:
    """Reads every NVIDIA GPU on demand. Blocking (NVML calls may take milliseconds): call it off the event loop."""

    def __init__(self) -> None:
        self._handles: list[tuple[int, object]] = []
        self.opened = False

    def open(self) -> bool:
        """Start NVML; False (and nothing to read) where there is no usable NVIDIA driver or GPU."""
        if sys.platform == "darwin":
            return False
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            log.info("no GPU metrics: NVML did not start (%s)", error)
            return False
        self.opened = True
        try:
            self._handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(int(pynvml.nvmlDeviceGetCount()))]
        except pynvml.NVMLError as error:
            log.warning("no GPU metrics: NVML could not list the GPUs (%s)", error)
            self.close()
            return False
        return bool(self._handles)

    def read(self) -> list[GPUReading]:
        readings = []
        for index, handle in self._handles:
            try:
                readings.append(_read(index, handle))
            except pynvml.NVMLError as error:
                # A GPU that fell off the bus must not hide the others; it simply has no point this tick.
                log.warning("GPU %d could not be read: %s", index, error)
        return readings

    def close(self) -> None:
        if self.opened:
            self.opened = False
            self._handles = []
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as error:
                log.warning("nvmlShutdown failed: %s", error)


def _read(index: int, handle: object) -> GPUReading:
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    utilization = _optional(lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
    temperature = _optional(lambda: float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)))
    power = _optional(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    processes: dict[int, int] = {}
    for process in _optional(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []:
        if process.usedGpuMemory is not None:
            processes[int(process.pid)] = processes.get(int(process.pid), 0) + int(process.usedGpuMemory)
    return GPUReading(index, int(memory.used), int(memory.total), utilization, temperature, power, processes)
