"""One HardwareProfile: what this machine has, as plain dataclasses that round-trip through JSON.

Unknown facts are None, never a guess. Byte counts are bytes, bandwidths bytes per second.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.bounded_json import load_json
from app.json_fields import checked_fields

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CPUInfo:
    """The processor: model name, cores and the instruction-set extensions engines care about."""

    model: str | None
    architecture: str
    physical_cores: int | None
    logical_cores: int
    features: tuple[str, ...] = ()  # lower-case names among avx, avx2, avx512f, fma, f16c, neon, ...
    memory_bandwidth: float | None = None


@dataclass(frozen=True)
class GPUInfo:
    """One accelerator. For Apple Silicon the memory is the unified memory shared with the CPU."""

    index: int
    vendor: str  # "nvidia" or "apple"
    name: str
    memory_total: int
    memory_free: int | None = None
    memory_used: int | None = None
    compute_capability: tuple[int, int] | None = None
    utilization_percent: int | None = None
    mig_enabled: bool | None = None
    memory_bandwidth: float | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class GPUProblem:
    """Why a GPU backend could not be used, in words a user can act on: a GPU doctor, not a silent fallback."""

    backend: str
    problem: str
    advice: str
    # "problem": something to fix before the GPU can be used; "note": nothing is wrong (no driver, and no GPU).
    severity: Literal["problem", "note"] = "problem"
    # The evidence behind the severity: whether the machine shows a device of this backend without asking its
    # driver (a PCI device, a /dev node); None where the system cannot tell.
    device_present: bool | None = None


@dataclass(frozen=True)
class HardwareProfile:
    """Everything the planner needs to know about the machine."""

    cpu: CPUInfo
    ram_total: int
    ram_available: int
    gpus: tuple[GPUInfo, ...] = ()
    unified_memory: bool = False
    metal: bool = False
    driver_version: str | None = None
    cuda_version: str | None = None
    gpu_problems: tuple[GPUProblem, ...] = ()
    models_dir: str | None = None
    disk_free: int | None = None
    os: str | None = None
    schema_version: int = field(default=SCHEMA_VERSION)

    @property
    def nvidia_gpus(self) -> tuple[GPUInfo, ...]:
        return tuple(gpu for gpu in self.gpus if gpu.vendor == "nvidia")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_file(cls, path: Path) -> HardwareProfile:
        """A profile saved from `modeldeck hw --json`; ValueError naming the file for one that is not (OSError as
        it comes for one that cannot be read)."""
        try:
            return cls.from_dict(load_json(path.read_bytes()))
        except ValueError as exc:
            raise ValueError(f"{path} is not a hardware profile from `modeldeck hw --json` ({exc})") from None

    @classmethod
    def from_dict(cls, data: Any) -> HardwareProfile:
        """Read a profile written by `to_dict` (or a recorded fixture); ValueError naming the field for unknown keys,
        missing ones, and values not of their field's type."""
        if isinstance(data, dict) and data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise ValueError(f"hardware profile schema {data.get('schema_version')!r} is not {SCHEMA_VERSION}")
        fields = checked_fields(cls, data, "the profile")
        cpu = checked_fields(CPUInfo, fields["cpu"], "its cpu")
        gpus = []
        for n, gpu in enumerate(fields.get("gpus", []), 1):
            capability = checked_fields(GPUInfo, gpu, f"gpu {n}").get("compute_capability")
            gpus.append(GPUInfo(**{**gpu, "compute_capability": tuple(capability) if capability else None}))
        problems = fields.get("gpu_problems", [])
        return cls(
            **{
                **fields,
                "cpu": CPUInfo(**{**cpu, "features": tuple(cpu.get("features", ()))}),
                "gpus": tuple(gpus),
                "gpu_problems": tuple(
                    GPUProblem(**checked_fields(GPUProblem, problem, f"gpu problem {n}"))
                    for n, problem in enumerate(problems, 1)
                ),
            }
        )
