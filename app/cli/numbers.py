"""Whole-number argument types: a value out of range is a one-line argparse error naming the flag (exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def whole_number(lowest: int, highest: int | None = None) -> Callable[[str], int]:
    """An argparse `type` for whole numbers from `lowest` to `highest` (None: no limit)."""

    def number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if highest is None and value < lowest:
            raise argparse.ArgumentTypeError(f"must be at least {lowest}, got {value}")
        if highest is not None and not lowest <= value <= highest:
            raise argparse.ArgumentTypeError(f"must be from {lowest} to {highest}, got {value}")
        return value

    return number


positive = whole_number(1)
tcp_port = whole_number(1, 65535)
