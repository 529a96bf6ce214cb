"""The size-based variant suggestion of a Hub model page, on recorded machines."""

from __future__ import annotations

import json
from pathlib import Path

from app.hardware.profile import HardwareProfile
from app.hub.variants import RepoFile, Variant
from app.service.control.recommend_variant import recommend_variant

FIXTURES = Path(__file__).parent.parent / "fixtures" / "hardware"
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
