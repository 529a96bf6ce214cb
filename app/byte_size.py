"""Sizes in bytes as people read them, in one spelling everywhere: IEC units (KiB, MiB, GiB, TiB), as the
operating system's memory figures and the GPU's are counted; a file on one page and its memory on another then
read in the same unit."""

from __future__ import annotations

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
UNKNOWN = "\N{EM DASH}"


def format_bytes(value: float | None) -> str:
    """'512 B', '93.8 MiB', '4.1 GiB': one decimal in the largest unit that keeps the number under 1024; unknown
    (None) is a dash. Negative sizes are refused: no size is below zero, and one that is means a bug upstream."""
    if value is None:
        return UNKNOWN
    if value < 0:
        raise ValueError(f"a size cannot be negative: {value}")
    size, unit = float(value), "B"
    for bigger in _UNITS:
        if round(size, 1) < 1024:  # 1023.96 MiB reads 1.0 GiB, not 1024.0 MiB
            break
        size, unit = size / 1024, bigger
    return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"


__all__ = ["UNKNOWN", "format_bytes"]
