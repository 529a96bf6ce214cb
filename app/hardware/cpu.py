"""The processor and the system memory: model, architecture, cores, the SIMD extensions engines use, RAM.

Feature names follow Linux's spelling for x86 (`avx512_vnni`) and plain names for Arm (`neon`, `dotprod`).
A feature is listed only when the system said so; an empty tuple means "not known", not "absent".
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from app.hardware.profile import CPUInfo
from app.hardware.sysctl import read_sysctl

log = logging.getLogger("modeldeck.hardware")

PROC_CPUINFO = Path("/proc/cpuinfo")

# Every feature this module can report, in the order it is reported.
FEATURE_ORDER = (
    "sse3", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni",
    "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8",
    "neon", "fp16", "dotprod", "i8mm", "bf16", "sve", "sve2", "sme", "sme2",
)  # fmt: skip

# Linux /proc/cpuinfo `flags` (x86) and `Features` (arm64) -> our names.
_LINUX_FEATURES: Mapping[str, str] = {
    **{name: name for name in FEATURE_ORDER if name not in ("sse3", "neon", "fp16", "dotprod")},
    "pni": "sse3",
    "asimd": "neon",
    "asimdhp": "fp16",
    "asimddp": "dotprod",
}

# macOS `sysctl hw.optional` names (value 1 when present) -> our names; Intel and Apple Silicon Macs.
_MACOS_FEATURES: Mapping[str, str] = {
    "hw.optional.sse3": "sse3",
    "hw.optional.supplementalsse3": "ssse3",
    "hw.optional.sse4_1": "sse4_1",
    "hw.optional.sse4_2": "sse4_2",
    "hw.optional.avx1_0": "avx",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.fma": "fma",
    "hw.optional.f16c": "f16c",
    "hw.optional.avx512f": "avx512f",
    "hw.optional.avx512bw": "avx512bw",
    "hw.optional.avx512vl": "avx512vl",
    "hw.optional.avx512vnni": "avx512_vnni",
    "hw.optional.neon": "neon",
    "hw.optional.AdvSIMD": "neon",
    "hw.optional.neon_fp16": "fp16",
    "hw.optional.arm.FEAT_FP16": "fp16",
    "hw.optional.arm.FEAT_DotProd": "dotprod",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
    "hw.optional.arm.FEAT_BF16": "bf16",
    "hw.optional.arm.FEAT_SME": "sme",
    "hw.optional.arm.FEAT_SME2": "sme2",
}

# Windows IsProcessorFeaturePresent constants (winnt.h) -> our names: the cheap facts Windows offers.
_WINDOWS_FEATURES: Mapping[int, str] = {
    13: "sse3", 36: "ssse3", 37: "sse4_1", 38: "sse4_2", 39: "avx", 40: "avx2", 41: "avx512f", 19: "neon", 43: "dotprod"
}  # fmt: skip

# platform.machine() says AMD64 on Windows and aarch64 on Linux for the same chips macOS calls x86_64 and arm64.
_ARCHITECTURES: Mapping[str, str] = {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64", "armv8": "arm64"}


@dataclass(frozen=True)
class SystemMemory:
    """RAM in bytes: all of it, and what can be used now without swapping."""

    total: int
    available: int


def normalize_architecture(machine: str) -> str:
    """`platform.machine()` spelled one way: x86_64 or arm64; anything else lower-cased as given."""
    return _ARCHITECTURES.get(machine.lower(), machine.lower())


def canonical_features(names: Iterable[str], table: Mapping[str, str]) -> tuple[str, ...]:
    """The features among `names` that `table` knows, renamed and in FEATURE_ORDER."""
    found = {table[name] for name in names if name in table}
    return tuple(feature for feature in FEATURE_ORDER if feature in found)


def parse_proc_cpuinfo(text: str) -> tuple[str | None, tuple[str, ...]]:
    """The model name and features of the first processor in Linux's /proc/cpuinfo (x86 or arm64).

    Arm kernels often print no model name (only implementer and part numbers): the model is then None.
    """
    model: str | None = None
    flags: list[str] = []
    for line in text.splitlines():
        key, separator, value = line.partition(":")
        if not separator:
            continue
        key = key.strip().lower()
        if key == "model name" and model is None:
            model = value.strip() or None
        elif key in ("flags", "features") and not flags:
            flags = value.split()
    return model, canonical_features(flags, _LINUX_FEATURES)


def parse_macos_features(values: Mapping[str, str]) -> tuple[str, ...]:
    """Features from `sysctl hw.optional` values: a name counts when its value is 1."""
    return canonical_features((name for name, value in values.items() if value == "1"), _MACOS_FEATURES)


def _linux_model_and_features() -> tuple[str | None, tuple[str, ...]]:
    try:
        return parse_proc_cpuinfo(PROC_CPUINFO.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        log.warning("cannot read %s: %s", PROC_CPUINFO, exc)
        return None, ()


def _macos_model_and_features() -> tuple[str | None, tuple[str, ...]]:
    values = read_sysctl("machdep.cpu.brand_string", "hw.optional")
    return values.get("machdep.cpu.brand_string") or None, parse_macos_features(values)


def _windows_model_and_features() -> tuple[str | None, tuple[str, ...]]:
    model: str | None = None
    features: list[str] = []
    if sys.platform == "win32":  # the guard also tells mypy that winreg and windll exist here
        import ctypes
        import winreg

        try:
            key = winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, r"HARDWARE\DESCRIPTION\System\CentralProcessor\0")
            with key:
                model = str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip() or None
        except OSError as exc:
            log.warning("cannot read the processor name from the registry: %s", exc)
        present = ctypes.windll.kernel32.IsProcessorFeaturePresent
        features = [name for code, name in _WINDOWS_FEATURES.items() if present(code)]
    return model, tuple(feature for feature in FEATURE_ORDER if feature in features)


def _unknown_model_and_features() -> tuple[str | None, tuple[str, ...]]:
    return None, ()


_READERS = {
    "linux": _linux_model_and_features,
    "darwin": _macos_model_and_features,
    "win32": _windows_model_and_features,
}


def detect_cpu() -> CPUInfo:
    """This machine's processor. Memory bandwidth is not measured: it stays None."""
    model, features = _READERS.get(sys.platform, _unknown_model_and_features)()
    logical = psutil.cpu_count(logical=True)
    return CPUInfo(
        model=model,
        architecture=normalize_architecture(platform.machine()),
        physical_cores=psutil.cpu_count(logical=False),
        # psutil answers None only where the OS will not say; Python's own count is the same question asked again.
        logical_cores=logical or os.cpu_count() or 1,
        features=features,
    )


def detect_memory() -> SystemMemory:
    """Total and available RAM (psutil: MemAvailable on Linux, which counts reclaimable caches as available)."""
    memory = psutil.virtual_memory()
    return SystemMemory(total=int(memory.total), available=int(memory.available))
