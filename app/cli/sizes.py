"""The one reader of sizes on the command line (--max-memory, --gpu-memory): 512M, 8G, 1.5T, 80GiB, or a number."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str, default_unit: int = 1) -> int:
    """Bytes in `text`: a number with an optional K, M, G or T (binary multiples; KB, KiB and the like read the
    same), or a bare number of `default_unit`s, to the nearest byte. ValueError when it is not a size, or less than
    one byte."""
    body = text.strip().upper().removesuffix("B").removesuffix("I")
    number, unit = (body[:-1], UNITS[body[-1]]) if body[-1:] in UNITS else (body, default_unit)
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (examples: 512M, 8G)") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"a size must be above zero, got {text!r}")
    size = round(value * unit)
    if size < 1:
        raise ValueError(f"a size must be at least one byte, got {text!r} (examples: 512M, 8G)")
    return size


def size_argument(default_unit: int = 1) -> Callable[[str], int]:
    """An argparse `type` for sizes; a bare number counts `default_unit`s."""

    def size(text: str) -> int:
        try:
            return parse_size(text, default_unit)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    size.__name__ = "size"  # argparse names the type in its error message
    return size
