"""The size-based variant suggestion of a Hub model page, on recorded machines."""

from __future__ import annotations

import json
from pathlib import Path

from app.hardware.profile import HardwareProfile
from app.hub.variants import RepoFile, Variant
from app.planner.facts import facts_from_gguf
from app.planner.recommend import recommend
from app.service.control.recommend_variant import (
    fits_by_size,
    fits_from_plan,
    pick_from_plan,
    plan_variants,
    recommend_variant,
)
from engines.gguf import read_gguf_info

FIXTURES = Path(__file__).parents[3] / "fixtures" / "hardware"
GB = 1_000_000_000


def machine(name: str) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def variant(name: str, size: int | None, parts: int = 1, present: int = 1) -> Variant:
    files = tuple(RepoFile(f"m-{name}-{i}.gguf", None if size is None else size // present) for i in range(present))
    return Variant(name, name, files, parts)


VARIANTS = [variant("Q4_K_M", 5 * GB), variant("Q8_0", 8 * GB), variant("F16", 16 * GB)]


def test_the_largest_that_fits_with_a_fifth_to_spare() -> None:
    laptop = recommend_variant(VARIANTS, machine("laptop_8core_16gb"))  # 9.7 GB of RAM available
    assert laptop.variant == "Q8_0" and "20 %" in laptop.basis and "free memory" in laptop.basis
    h200 = recommend_variant(VARIANTS, machine("h200"))
    assert h200.variant == "F16" and "GPU memory" in h200.basis


def test_unified_memory_counts_available_ram() -> None:
    assert recommend_variant(VARIANTS, machine("m2max_32gb")).variant == "F16"  # 19.9 GB available


def test_none_fits_incomplete_and_unknown_sizes_are_never_picked() -> None:
    laptop = machine("laptop_8core_16gb")
    assert recommend_variant([variant("F16", 16 * GB)], laptop).variant is None
    assert recommend_variant([variant("Q8_0", 8 * GB, parts=2)], laptop).variant is None
    assert recommend_variant([variant("Q4_0", None)], laptop).variant is None
    assert recommend_variant([], laptop).basis == "no GGUF variants to choose from"


def test_fit_by_size_on_recorded_machines() -> None:
    h200 = machine("h200")
    assert fits_by_size(VARIANTS, h200) == {"Q4_K_M": "gpu", "Q8_0": "gpu", "F16": "gpu"}
    laptop = machine("laptop_8core_16gb")  # no GPU, 9.7 GB available
    assert fits_by_size(VARIANTS, laptop) == {"Q4_K_M": "cpu", "Q8_0": "cpu", "F16": "too_big"}
    rtx = machine("rtx4090_24gb")
    free = sum(gpu.memory_free or 0 for gpu in rtx.gpus)
    huge = [variant("Q2_K", int(free / 1.2) - GB), variant("Q8_0", int(free / 1.2) + GB), variant("F32", 10**13)]
    assert fits_by_size(huge, rtx) == {"Q2_K": "gpu", "Q8_0": "partial", "F32": "too_big"}
    assert fits_by_size([variant("Q4_0", None), variant("Q5_0", 5 * GB, parts=2)], rtx) == {}  # unknown: left out
    assert recommend_variant(VARIANTS, laptop).fits == fits_by_size(VARIANTS, laptop)  # the pick carries them


def test_fit_by_the_planner_on_a_recorded_nvidia_machine_and_a_laptop(bundled_gguf: Path) -> None:
    """The planner costs each variant of the bundled model's architecture, scaled to sizes from tiny to huge:
    on the recorded H200 small ones run all on the GPU; on the laptop on the CPU, and a huge one nowhere."""
    info = read_gguf_info(bundled_gguf)
    size = bundled_gguf.stat().st_size
    sizes = {"Q4_1": size, "F16": 4 * size, "HUGE": 4000 * size}
    variants = [Variant(name, name, (RepoFile(f"smol-{name}.gguf", s),), 1) for name, s in sizes.items()]
    planned = plan_variants("org/smol", variants, variants[0].files[0], facts_from_gguf(info))
    on_h200 = fits_from_plan(recommend(machine("h200"), planned, "chat"))
    assert on_h200["Q4_1"] == on_h200["F16"] == "gpu"
    on_laptop = fits_from_plan(recommend(machine("laptop_8core_16gb"), planned, "chat"))
    assert on_laptop["Q4_1"] == on_laptop["F16"] == "cpu" and on_laptop["HUGE"] == "too_big"
    pick = pick_from_plan(recommend(machine("laptop_8core_16gb"), planned, "chat"))
    assert pick.fits == on_laptop and pick.variant in ("Q4_1", "F16")
