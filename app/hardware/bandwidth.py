"""System memory bandwidth, measured: the figure decode speed on the CPU is bound by. Nothing reports it, so it is
timed once per machine (a large array copy, about a quarter of a second) and kept in the cache directory."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from app.bounded_json import load_json
from engines.atomic_files import write_atomically

log = logging.getLogger("modeldeck.hardware")

COPY_BYTES = 256 * 2**20  # far larger than any CPU cache, small enough to be quick
ROUNDS = 3


def measure_memory_bandwidth() -> float:
    """Bytes per second one array copy moves (each byte read once and written once), best of a few rounds."""
    source = np.ones(COPY_BYTES // 8, dtype=np.float64)
    target = np.empty_like(source)
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - started)
    return 2 * COPY_BYTES / best


def cached_memory_bandwidth(cache_file: Path, machine_key: str) -> float | None:
    """The measured bandwidth for this machine, measured now if the cache has none for `machine_key`."""
    try:
        cached = load_json(cache_file.read_bytes())
    except (OSError, ValueError):
        cached = None  # no cache yet, or an unreadable one: measure again
    cached_bandwidth = (
        cached.get("bytes_per_second") if isinstance(cached, dict) and cached.get("machine") == machine_key else None
    )
    if isinstance(cached_bandwidth, float):
        return cached_bandwidth
    try:
        bandwidth = measure_memory_bandwidth()
    except MemoryError:
        log.warning("not enough free memory to measure memory bandwidth")
        return None
    try:
        write_atomically(cache_file, json.dumps({"machine": machine_key, "bytes_per_second": bandwidth}))
    except OSError as exc:
        log.warning("cannot cache memory bandwidth in %s: %s", cache_file, exc)
    return bandwidth
