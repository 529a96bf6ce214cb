"""Apple Silicon: the chip, its unified memory and Metal, as one GPU that shares its memory with the CPU."""

from __future__ import annotations

import logging
import platform
import sys
from collections.abc import Mapping

from app.hardware.detector import GPUDetection
from app.hardware.profile import GPUInfo
from app.hardware.sysctl import read_sysctl, sysctl_int

log = logging.getLogger("modeldeck.hardware")

GB = 1e9

# Apple's published memory bandwidth per chip, bytes per second. A chip missing here has an unknown bandwidth.
CHIP_BANDWIDTH: Mapping[str, float] = {
    "M1": 68.25 * GB, "M1 Pro": 200 * GB, "M1 Max": 400 * GB, "M1 Ultra": 800 * GB,
    "M2": 100 * GB, "M2 Pro": 200 * GB, "M2 Max": 400 * GB, "M2 Ultra": 800 * GB,
    "M3": 100 * GB, "M3 Pro": 150 * GB, "M3 Ultra": 819 * GB,
    "M4": 120 * GB, "M4 Pro": 273 * GB,
}  # fmt: skip

# Chips sold in two versions with different memory buses, told apart by their CPU core count. A core count not
# listed leaves the bandwidth unknown rather than picking one of the two.
BINNED_CHIP_BANDWIDTH: Mapping[tuple[str, int], float] = {
    ("M3 Max", 14): 300 * GB, ("M3 Max", 16): 400 * GB,
    ("M4 Max", 14): 410 * GB, ("M4 Max", 16): 546 * GB,
}  # fmt: skip

# The rule: Metal counts as available on Apple Silicon running macOS 12 (Monterey) or later. Every Apple Silicon
# GPU supports Metal; the macOS floor is our conservative line for the Metal the engines use, not a probe of it.
METAL_MIN_MACOS = 12


def chip_name(brand: str) -> str | None:
    """`Apple M2 Max` -> `M2 Max`; None for a processor that is not Apple Silicon (an Intel Mac)."""
    prefix = "Apple "
    if not brand.startswith(prefix):
        return None
    return brand.removeprefix(prefix).strip() or None


def chip_bandwidth(chip: str, cpu_cores: int | None) -> float | None:
    """The chip's memory bandwidth in bytes per second, None where it is not known for sure."""
    if chip in CHIP_BANDWIDTH:
        return CHIP_BANDWIDTH[chip]
    if cpu_cores is None:
        return None
    return BINNED_CHIP_BANDWIDTH.get((chip, cpu_cores))


def metal_available(macos_version: str) -> bool:
    """Whether this macOS release is new enough for Metal by the rule above ("14.5" -> True)."""
    major = macos_version.split(".", 1)[0]
    return major.isdigit() and int(major) >= METAL_MIN_MACOS


def apple_gpu(values: Mapping[str, str], macos_version: str) -> GPUDetection:
    """The Apple Silicon GPU described by `sysctl machdep.cpu.brand_string hw.memsize hw.physicalcpu` values."""
    brand = values.get("machdep.cpu.brand_string", "")
    chip = chip_name(brand)
    memory = sysctl_int(values, "hw.memsize")
    if chip is None:
        return GPUDetection()
    if memory is None:
        log.warning("sysctl did not report hw.memsize on %s", brand)
        return GPUDetection()
    gpu = GPUInfo(
        index=0,
        vendor="apple",
        name=brand,
        memory_total=memory,
        # macOS does not say how much of the unified memory the GPU may use right now: unknown, not guessed.
        memory_free=None,
        memory_bandwidth=chip_bandwidth(chip, sysctl_int(values, "hw.physicalcpu")),
    )
    return GPUDetection(gpus=(gpu,), unified_memory=True, metal=metal_available(macos_version))


def detect_apple() -> GPUDetection:
    """The Apple Silicon GPU of this Mac; nothing anywhere else."""
    if sys.platform != "darwin":
        return GPUDetection()
    values = read_sysctl("machdep.cpu.brand_string", "hw.memsize", "hw.physicalcpu")
    return apple_gpu(values, platform.mac_ver()[0])
