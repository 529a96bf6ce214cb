"""Which GGUF variant of a Hub model to suggest before it is downloaded.

The planner costs each variant from its header (layers, heads, context), read from the Hub with Range requests.
The variants of one repository share their architecture, so one header is read and each variant's weights are
scaled by its file size. When no header can be read, the suggestion is by size alone, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from app.hardware.profile import HardwareProfile
from app.hub.variants import RepoFile, Variant
from app.planner.facts import ModelFacts
from app.planner.recommend import Recommendation
from app.planner.recommend import Variant as PlanVariant

MARGIN = 1.2  # room for the KV cache and the runtime beside the weights
BASIS = "size-based pick: the largest variant whose file fits in free {where} with a 20 % margin ({free:.1f} GB free)"


@dataclass(frozen=True)
class VariantPick:
    """The suggested variant (None: none fits, or sizes are unknown), how it was chosen in words, and by what:
    "planner" (with the option's reasons, memory and max context in `plan`) or "size"."""

    variant: str | None
    basis: str
    source: str = "size"
    plan: dict[str, Any] | None = None
    # How each variant would run here: "gpu" (all on the GPU), "partial" (layers offloaded to the CPU), "cpu"
    # or "too_big"; a variant left out (unknown size, incomplete) is unknown.
    fits: dict[str, str] = field(default_factory=dict)


def free_memory(hardware: HardwareProfile) -> tuple[int, str]:
    """Free bytes where the weights would live: GPU memory when every GPU reports it, else available RAM."""
    gpu_free = [gpu.memory_free for gpu in hardware.gpus]
    if gpu_free and not hardware.unified_memory and all(free is not None for free in gpu_free):
        return sum(free for free in gpu_free if free is not None), "GPU memory"
    return hardware.ram_available, "memory"


def recommend_variant(variants: list[Variant], hardware: HardwareProfile) -> VariantPick:
    """The size-based pick: the fallback when no header could be read."""
    free, where = free_memory(hardware)
    basis = BASIS.format(where=where, free=free / 1e9)
    fits = fits_by_size(variants, hardware)
    fitting = [v for v in variants if v.complete and v.size is not None and v.size * MARGIN <= free]
    if not fitting:
        return VariantPick(
            None, f"no variant fits: {basis}" if variants else "no GGUF variants to choose from", fits=fits
        )
    return VariantPick(max(fitting, key=lambda v: v.size or 0).name, basis, fits=fits)


def fits_by_size(variants: list[Variant], hardware: HardwareProfile) -> dict[str, str]:
    """Where each variant's file would fit with the same 20 % margin: the GPUs' free memory, the GPUs and RAM
    together (layers offloaded), RAM alone, or nowhere. Unknown sizes are left out."""
    gpu_free = [gpu.memory_free for gpu in hardware.gpus]
    on_gpu = 0
    if gpu_free and not hardware.unified_memory and all(free is not None for free in gpu_free):
        on_gpu = sum(free for free in gpu_free if free is not None)
    fits = {}
    for variant in variants:
        if not variant.complete or variant.size is None:
            continue
        need = variant.size * MARGIN
        if on_gpu and need <= on_gpu:
            fits[variant.name] = "gpu"
        elif on_gpu and need <= on_gpu + hardware.ram_available:
            fits[variant.name] = "partial"
        elif need <= hardware.ram_available:
            fits[variant.name] = "cpu"
        else:
            fits[variant.name] = "too_big"
    return fits


def fits_from_plan(recommendation: Recommendation) -> dict[str, str]:
    """Where the planner would run each variant: its best option's tier, or "too_big" when no option fits."""
    ranked = ([recommendation.best] if recommendation.best else []) + list(recommendation.alternatives)
    fits: dict[str, str] = {}
    for option in ranked:  # ranked with the options that fit first: a variant's first option is its best
        fits.setdefault(option.variant, option.tier if option.fits else "too_big")
    return fits


def header_file(variants: list[Variant]) -> RepoFile | None:
    """The file whose header stands for every variant: a single-file variant's if any (its tensors are all the
    model's), else the first part of a split one; only files of known size."""
    usable = [v for v in variants if v.complete and v.size]
    usable.sort(key=lambda v: (len(v.files) > 1, v.size or 0))
    return usable[0].files[0] if usable else None


def plan_variants(repo_id: str, variants: list[Variant], source: RepoFile, facts: ModelFacts) -> list[PlanVariant]:
    """Each complete variant as the planner sees it: the header's facts with weights scaled by the file size."""
    source_variant = next(v for v in variants if source in v.files)
    if not source.size or not source_variant.size or facts.weight_bytes is None:
        return []
    # A split file's first part describes only its own tensors: scale its counts up to the whole variant.
    parameters = facts.parameters * source_variant.size // source.size if facts.parameters else None
    planned = []
    for variant in variants:
        if not variant.complete or not variant.size:
            continue
        scaled = replace(
            facts,
            parameters=parameters,
            weight_bytes=facts.weight_bytes * variant.size // source.size,
            quantization=variant.quant or variant.name,
        )
        planned.append(PlanVariant(variant.name, scaled, f"{repo_id}/{variant.files[0].path}"))
    return planned


def pick_from_plan(recommendation: Recommendation) -> VariantPick:
    """The planner's best option as the page's suggestion, with its reasons, memory and max context."""
    best = recommendation.best
    if best is None:
        problems = "; ".join(recommendation.problems) or "nothing fits"
        return VariantPick(None, f"plan for this machine: {problems}", "planner", fits=fits_from_plan(recommendation))
    plan = {
        "engine": best.engine,
        "tier": best.tier,
        "context": best.context,
        "max_context": best.max_context,
        "memory": best.memory.to_dict(),
        "reasons": list(best.reasons),
    }
    ram, vram = best.memory.ram / 1e9, best.memory.vram / 1e9
    memory = f"{vram:.1f} GB of GPU memory and {ram:.1f} GB of RAM" if vram else f"{ram:.1f} GB of RAM"
    basis = (
        f"plan for this machine: {'; '.join(best.reasons[:2])}; about {memory} at {best.context} tokens of "
        f"context, at most {best.max_context}"
    )
    return VariantPick(best.variant, basis, "planner", plan, fits_from_plan(recommendation))
