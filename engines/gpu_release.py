"""Waiting after an engine stops until the GPU memory its processes held is free again.

A CUDA process's memory is returned by the driver after the process has exited, sometimes seconds later (vLLM's
workers tear down NCCL and CUDA graphs first). Starting the next engine before that makes its memory profiling see
too little free memory. The probe is injected: the service passes NVML's per-process reading
(app.hardware.nvidia.process_vram); without a probe, or where the probe cannot tell (no NVIDIA driver), the wait
returns at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import psutil

# Bytes the given processes hold on every GPU, or None where that cannot be known (no driver, no GPU).
GPUMemoryProbe = Callable[[set[int]], int | None]


@dataclass(frozen=True)
class GPURelease:
    """How a wait ended: released, or still `held_bytes` after `waited_s`; `known` False when nothing could tell."""

    known: bool
    released: bool
    held_bytes: int
    waited_s: float

    def text(self) -> str:
        if not self.known:
            return "GPU memory: not measured (no NVIDIA driver)"
        if self.released:
            return f"GPU memory released after {self.waited_s:.1f} s"
        return f"GPU memory still held after {self.waited_s:.1f} s: {self.held_bytes / 2**20:.0f} MiB"


def process_tree(pid: int) -> set[int]:
    """The pid and its descendants now: taken before a stop, since the children are gone after it."""
    try:
        root = psutil.Process(pid)
        return {root.pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.NoSuchProcess:
        return set()


async def wait_gpu_released(
    pids: Collection[int],
    probe: GPUMemoryProbe | None,
    timeout_s: float,
    poll_s: float = 0.25,
) -> GPURelease:
    """Poll `probe` (off the event loop: NVML blocks) until `pids` hold no GPU memory, at most `timeout_s`."""
    started = time.monotonic()
    if probe is None or not pids:
        return GPURelease(known=probe is not None, released=True, held_bytes=0, waited_s=0.0)
    watched = set(pids)
    while True:
        held = await asyncio.to_thread(probe, watched)
        waited = time.monotonic() - started
        if held is None:
            return GPURelease(known=False, released=True, held_bytes=0, waited_s=waited)
        if held == 0:
            return GPURelease(known=True, released=True, held_bytes=0, waited_s=waited)
        if waited >= timeout_s:
            return GPURelease(known=True, released=False, held_bytes=held, waited_s=waited)
        await asyncio.sleep(poll_s)


__all__ = ["GPUMemoryProbe", "GPURelease", "process_tree", "wait_gpu_released"]
