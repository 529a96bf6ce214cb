"""What a plan may use on a machine (RAM, each GPU's memory, less a margin) and the decode speed memory bandwidth
allows it."""

from __future__ import annotations

from dataclasses import dataclass

from app.hardware.profile import GPUInfo, HardwareProfile
from app.planner.memory import CUDA_CONTEXT, GIB, MIB, MemoryEstimate

DECODE_EFFICIENCY = 0.6  # share of peak memory bandwidth decode reaches in practice
APPLE_GPU_SHARE = 0.75  # macOS lets Metal wire about this much of unified memory (recommendedMaxWorkingSetSize)


def _margin(total: int, share: float, floor: int) -> int:
    return max(int(total * share), floor)


@dataclass(frozen=True)
class Budgets:
    """Bytes a plan may use: system RAM, and VRAM on each GPU (for Apple, one pool shared with the CPU)."""

    ram: int
    gpus: tuple[GPUInfo, ...]
    vram: tuple[int, ...]
    unified: bool

    @classmethod
    def of(cls, hw: HardwareProfile) -> Budgets:
        ram = hw.ram_available - _margin(hw.ram_total, 0.05, 1 * GIB)
        if hw.unified_memory and hw.gpus:
            pool = min(hw.ram_available, int(hw.gpus[0].memory_total * APPLE_GPU_SHARE))
            return cls(pool - _margin(hw.ram_total, 0.05, 1 * GIB), hw.gpus[:1], (0,), True)
        gpus = tuple(gpu for gpu in hw.nvidia_gpus if not gpu.mig_enabled)
        vram = tuple(
            (gpu.memory_free if gpu.memory_free is not None else gpu.memory_total)
            - _margin(gpu.memory_total, 0.05, 512 * MIB)
            for gpu in gpus
        )
        return cls(max(ram, 0), gpus, vram, False)

    def llama_fits(self, estimate: MemoryEstimate) -> bool:
        if self.unified:
            return estimate.ram + estimate.vram <= self.ram
        if estimate.ram > self.ram:
            return False
        if not estimate.vram:
            return True
        # llama.cpp splits layers across GPUs in proportion to their memory; the CUDA context is paid on each.
        spread = estimate.vram - CUDA_CONTEXT
        return spread <= sum(v - CUDA_CONTEXT for v in self.vram) and all(v > CUDA_CONTEXT for v in self.vram)


def decode_speed(hw: HardwareProfile, gpu_bytes: float, cpu_bytes: float) -> float | None:
    """Tokens/s of one stream when decode is bound by reading `gpu_bytes` from one GPU's memory and `cpu_bytes` from
    system memory for every token (tensor-parallel shards are read at once, so pass one GPU's share)."""
    seconds = 0.0
    if gpu_bytes:
        bandwidth = hw.gpus[0].memory_bandwidth if hw.gpus else None
        if not bandwidth:
            return None
        seconds += gpu_bytes / bandwidth
    if cpu_bytes:
        bandwidth = hw.gpus[0].memory_bandwidth if hw.unified_memory and hw.gpus else hw.cpu.memory_bandwidth
        if not bandwidth:
            return None
        seconds += cpu_bytes / bandwidth
    return round(DECODE_EFFICIENCY / seconds, 1) if seconds else None
