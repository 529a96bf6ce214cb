"""NVML answering for a recorded machine profile (tests/fixtures/hardware/*.json): the GPU that cannot exist here.

`nvml_fakes` gives replacements for the `pynvml` functions ModelDeck calls, to be set with monkeypatch in a test
or by tests/support/nvml_site/sitecustomize.py in a child process (the service). Facts the profile does not record
(bus width, clocks, power, temperature, MIG) answer NOT_SUPPORTED, as a board that does not report them would.
Running `vllm serve` processes (the stand-in of tests/support/vllm_standin.py) are reported as holding
STANDIN_VRAM on the first GPU, so that per-process readings and the wait for GPU memory after a stop see them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pynvml

PROFILE_ENV = "MODELDECK_TEST_NVML_PROFILE"  # the recorded profile a child process's NVML answers for
STANDIN_VRAM = 1 << 30


def _not_supported(*_args: Any) -> Any:
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


def _serving_processes() -> list[SimpleNamespace]:
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any(Path(arg).name == "vllm" for arg in cmdline) and "serve" in cmdline:
            found.append(SimpleNamespace(pid=process.info["pid"], usedGpuMemory=STANDIN_VRAM))
    return found


def nvml_fakes(profile_path: Path) -> dict[str, Callable[..., Any]]:
    """The `pynvml` functions ModelDeck calls, answering with the NVIDIA GPUs of the recorded profile."""
    profile = json.loads(profile_path.read_text(encoding="utf-8"))
    gpus = [gpu for gpu in profile["gpus"] if gpu["vendor"] == "nvidia"]
    major, minor = (profile.get("cuda_version") or "12.0").split(".")
    return {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlSystemGetDriverVersion": lambda: profile.get("driver_version") or "",
        "nvmlSystemGetCudaDriverVersion": lambda: int(major) * 1000 + int(minor) * 10,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetName": lambda h: gpus[h]["name"],
        "nvmlDeviceGetUUID": lambda h: gpus[h]["uuid"],
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(
            total=gpus[h]["memory_total"], free=gpus[h]["memory_free"], used=gpus[h]["memory_used"]
        ),
        "nvmlDeviceGetCudaComputeCapability": lambda h: tuple(gpus[h]["compute_capability"]),
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=gpus[h]["utilization_percent"], memory=0),
        "nvmlDeviceGetComputeRunningProcesses": lambda h: _serving_processes() if h == 0 else [],
        "nvmlDeviceGetMemoryBusWidth": _not_supported,
        "nvmlDeviceGetMaxClockInfo": _not_supported,
        "nvmlDeviceGetMigMode": _not_supported,
        "nvmlDeviceGetPowerUsage": _not_supported,
        "nvmlDeviceGetTemperature": _not_supported,
    }
