"""GPU series: per GPU, and its memory split by process. No GPU runs here, so NVML is faked where a GPU is
needed; on this machine the real NVML must give no GPU at all rather than made-up zeros."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from app.hardware.gpu_sampling import GPUReading, NvmlSampler
from app.service.metrics.sampling import gpu_points
from app.service.metrics.series import Point

GIB = 2**30


def test_real_nvml_without_a_gpu_reads_nothing() -> None:
    sampler = NvmlSampler()
    try:
        opened = sampler.open()
        if opened:
            pytest.skip("this machine has an NVIDIA GPU")
        assert sampler.read() == []
    finally:
        sampler.close()


def fake_nvml(monkeypatch: pytest.MonkeyPatch, power_error: bool = False) -> None:
    """One 80 GiB GPU, 30 GiB used, two processes on it; this board does not report power if asked."""

    def power(_handle: Any) -> int:
        if power_error:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 312_500

    fakes = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: f"gpu{index}",
        "nvmlDeviceGetMemoryInfo": lambda _h: SimpleNamespace(used=30 * GIB, total=80 * GIB, free=50 * GIB),
        "nvmlDeviceGetUtilizationRates": lambda _h: SimpleNamespace(gpu=87, memory=40),
        "nvmlDeviceGetTemperature": lambda _h, _sensor: 64,
        "nvmlDeviceGetPowerUsage": power,
        "nvmlDeviceGetComputeRunningProcesses": lambda _h: [
            SimpleNamespace(pid=4242, usedGpuMemory=20 * GIB),
            SimpleNamespace(pid=999, usedGpuMemory=3 * GIB),
            SimpleNamespace(pid=1000, usedGpuMemory=None),  # Windows WDDM: unknown, left out
        ],
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)


def test_readings_and_points_split_by_process(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch)
    sampler = NvmlSampler()
    assert sampler.open()
    readings = sampler.read()
    sampler.close()
    assert readings == [GPUReading(0, 30 * GIB, 80 * GIB, 87.0, 64.0, 312.5, {4242: 20 * GIB, 999: 3 * GIB})]
    points = gpu_points(readings, {4242: "llama-8b"})
    assert Point.of("gpu_process_memory_bytes", 20 * GIB, gpu="0", model="llama-8b") in points
    assert Point.of("gpu_process_memory_bytes", 3 * GIB, gpu="0", model="other") in points
    assert Point.of("gpu_memory_used_bytes", 30 * GIB, gpu="0") in points
    assert Point.of("gpu_power_w", 312.5, gpu="0") in points


def test_a_fact_the_board_does_not_report_has_no_series(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(monkeypatch, power_error=True)
    sampler = NvmlSampler()
    assert sampler.open()
    readings = sampler.read()
    sampler.close()
    assert readings[0].power_w is None
    assert "gpu_power_w" not in {point.name for point in gpu_points(readings, {})}
