"""Which GGUF variant of a Hub model to suggest before it is downloaded.

The planner needs a model's header (layers, heads, context) to plan it, and a Hub file's header is only read after
the download; until then the suggestion is by size alone, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.hardware.profile import HardwareProfile
from app.hub.variants import Variant

MARGIN = 1.2  # room for the KV cache and the runtime beside the weights
BASIS = "size-based pick: the largest variant whose file fits in free {where} with a 20 % margin ({free:.1f} GB free)"


@dataclass(frozen=True)
class VariantPick:
    """The suggested variant (None: none fits, or sizes are unknown) and how it was chosen, in words."""

    variant: str | None
    basis: str


def free_memory(hardware: HardwareProfile) -> tuple[int, str]:
    """Free bytes where the weights would live: GPU memory when every GPU reports it, else available RAM."""
    gpu_free = [gpu.memory_free for gpu in hardware.gpus]
    if gpu_free and not hardware.unified_memory and all(free is not None for free in gpu_free):
        return sum(free for free in gpu_free if free is not None), "GPU memory"
    return hardware.ram_available, "memory"


def recommend_variant(variants: list[Variant], hardware: HardwareProfile) -> VariantPick:
    free, where = free_memory(hardware)
    basis = BASIS.format(where=where, free=free / 1e9)
    fitting = [v for v in variants if v.complete and v.size is not None and v.size * MARGIN <= free]
    if not fitting:
        return VariantPick(None, f"no variant fits: {basis}" if variants else "no GGUF variants to choose from")
    return VariantPick(max(fitting, key=lambda v: v.size or 0).name, basis)
