"""The concurrency levels of a sweep, read alike by the CLI, the service and the Benchmark page: this module imports
nothing, so the window may use it without the load generator, the planner or the engines behind it."""

from __future__ import annotations

MAX_CONCURRENCY = 4096


def parse_concurrency(text: str) -> tuple[int, ...]:
    """ "1,4,16" -> (1, 4, 16); each level a whole number from 1 to 4096."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or any(not part.isdecimal() or not 1 <= int(part) <= MAX_CONCURRENCY for part in parts):
        raise ValueError(f"concurrency levels must be whole numbers from 1 to {MAX_CONCURRENCY}, got {text!r}")
    return tuple(int(part) for part in parts)


__all__ = ["MAX_CONCURRENCY", "parse_concurrency"]
