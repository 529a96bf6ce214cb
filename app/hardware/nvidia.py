"""NVIDIA GPUs through NVML (the `pynvml` module of nvidia-ml-py): one init, read every device, always shut down."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

from app.hardware.detector import GPUDetection
from app.hardware.nvidia_doctor import explain_nvml_error, no_devices_problem, nvidia_device_present, nvml_error_code
from app.hardware.profile import GPUInfo

log = logging.getLogger("modeldeck.hardware")

T = TypeVar("T")

# Errors that mean "this GPU or driver does not report that fact": the fact is unknown, the GPU is still usable.
_FACT_UNKNOWN = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_NO_DATA,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
    }
)


def cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version integer as people write it: 12040 -> "12.4"."""
    return f"{version // 1000}.{version % 1000 // 10}"


def memory_bandwidth(bus_width_bits: int | None, max_memory_clock_mhz: int | None) -> float | None:
    """Peak memory bandwidth in bytes per second from the bus width and NVML's maximum memory clock.

    NVML reports the memory clock at half the data rate for GDDR and HBM alike, hence two transfers per clock:
    RTX 4090 384 bit x 10501 MHz -> 1008 GB/s, A100-SXM4-80GB 5120 bit x 1593 MHz -> 2039 GB/s, which are the
    datasheet figures.
    """
    if not bus_width_bits or not max_memory_clock_mhz:
        return None
    return 2.0 * max_memory_clock_mhz * 1e6 * bus_width_bits / 8


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes where newer ones return str.
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _optional(read: Callable[[], T]) -> T | None:
    """The fact `read` returns, or None where this GPU or driver does not report it."""
    try:
        return read()
    except pynvml.NVMLError as error:
        if nvml_error_code(error) not in _FACT_UNKNOWN:
            raise
        return None


def _mig_enabled(handle: Any) -> bool | None:
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError as error:
        if nvml_error_code(error) == pynvml.NVML_ERROR_NOT_SUPPORTED:
            return False  # a GPU without MIG support certainly does not run in MIG mode
        if nvml_error_code(error) in _FACT_UNKNOWN:
            return None
        raise
    return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)


def _read_gpu(index: int) -> GPUInfo:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    capability = _optional(lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    bus_width = _optional(lambda: int(pynvml.nvmlDeviceGetMemoryBusWidth(handle)))
    memory_clock = _optional(lambda: int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)))
    return GPUInfo(
        index=index,
        vendor="nvidia",
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        memory_total=int(memory.total),
        memory_free=int(memory.free),
        memory_used=int(memory.used),
        compute_capability=(int(capability[0]), int(capability[1])) if capability else None,
        utilization_percent=_optional(lambda: int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
        mig_enabled=_mig_enabled(handle),
        memory_bandwidth=memory_bandwidth(bus_width, memory_clock),
        uuid=_optional(lambda: _text(pynvml.nvmlDeviceGetUUID(handle))),
    )


def _read_devices() -> GPUDetection:
    driver = _optional(lambda: _text(pynvml.nvmlSystemGetDriverVersion()))
    cuda = _optional(lambda: cuda_version_text(int(pynvml.nvmlSystemGetCudaDriverVersion())))
    count = int(pynvml.nvmlDeviceGetCount())
    if count == 0:
        return GPUDetection(problems=(no_devices_problem(nvidia_device_present()),), driver_version=driver)
    gpus: list[GPUInfo] = []
    problems = []
    for index in range(count):
        # One broken GPU must not hide the others: it becomes a problem naming its index.
        try:
            gpus.append(_read_gpu(index))
        except pynvml.NVMLError as error:
            problems.append(explain_nvml_error(error, device_present=True, gpu_index=index))
    return GPUDetection(tuple(gpus), tuple(problems), driver_version=driver, cuda_version=cuda)


def _shutdown() -> None:
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as error:
        log.warning("nvmlShutdown failed: %s", error)


def detect_nvidia() -> GPUDetection:
    """Every NVIDIA GPU NVML reports, or the reason it could not, as a GPUProblem."""
    if sys.platform == "darwin":
        return GPUDetection()  # no NVIDIA driver has existed for macOS since 2019: nothing to look for, or report
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        # Only now look at the PCI bus: it is what tells "no GPU, nothing to fix" from "a GPU without a driver".
        return GPUDetection(problems=(explain_nvml_error(error, nvidia_device_present()),))
    try:
        return _read_devices()
    except pynvml.NVMLError as error:
        return GPUDetection(problems=(explain_nvml_error(error, nvidia_device_present()),))
    finally:
        _shutdown()


def process_vram(pids: set[int]) -> int | None:
    """GPU memory the processes `pids` hold on every NVIDIA GPU, or None where NVML cannot tell (no driver)."""
    if sys.platform == "darwin":
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        used = 0
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid in pids and process.usedGpuMemory is not None:
                    used += int(process.usedGpuMemory)
        return used
    except pynvml.NVMLError as error:
        log.warning("per-process GPU memory unavailable: %s", error)
        return None
    finally:
        _shutdown()
