"""The memory budget of the engines: how much their predicted peaks may add up to before the least recently used
idle one is stopped, and a start that cannot fit is refused.

Without a budget any key holder could start every model at once and push the machine into swap or the GPU out of
memory. By default the budget is what was free when the service started, less a margin for everything else (the
desktop, the service itself, the GPU driver): free RAM, plus each GPU's free memory (none on unified memory, where
the GPU's memory is the RAM). `--max-memory` sets it instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.hardware.profile import HardwareProfile

GIB = 1 << 30
RAM_MARGIN_FRACTION = 0.10  # of the machine's RAM, at least RAM_MARGIN_MIN
RAM_MARGIN_MIN = 1 * GIB
VRAM_MARGIN_FRACTION = 0.05  # of each GPU's memory, at least VRAM_MARGIN_MIN: contexts, fragmentation
VRAM_MARGIN_MIN = GIB // 2


@dataclass(frozen=True)
class MemoryBudget:
    """The budget in bytes (None: none) and where it comes from, as status shows it."""

    bytes: int | None
    source: str

    def to_dict(self) -> dict[str, object]:
        return {"bytes": self.bytes, "source": self.source}


def configured_budget(max_memory: int) -> MemoryBudget:
    return MemoryBudget(max_memory, "--max-memory")


def default_budget(hardware: HardwareProfile) -> MemoryBudget:
    """What was free at start less the margins; unknown GPU free memory counts as none."""
    ram_margin = max(RAM_MARGIN_MIN, int(hardware.ram_total * RAM_MARGIN_FRACTION))
    total = max(0, hardware.ram_available - ram_margin)
    gpus = 0
    if not hardware.unified_memory:
        for gpu in hardware.gpus:
            if gpu.memory_free is not None:
                margin = max(VRAM_MARGIN_MIN, int(gpu.memory_total * VRAM_MARGIN_FRACTION))
                gpus += max(0, gpu.memory_free - margin)
    total += gpus
    what = "free RAM" + (" and GPU memory" if gpus else "")
    return MemoryBudget(total, f"{what} at start less a margin (--max-memory changes it)")
