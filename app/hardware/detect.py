"""`detect_hardware`: the CPU, the memory, each GPU backend in turn, and the disk, into one HardwareProfile."""

from __future__ import annotations

import dataclasses
import logging
import platform
import shutil
from collections.abc import Sequence
from pathlib import Path

from app.hardware.apple import detect_apple
from app.hardware.bandwidth import cached_memory_bandwidth
from app.hardware.cpu import detect_cpu, detect_memory
from app.hardware.detector import GPUDetection, GPUDetector
from app.hardware.nvidia import detect_nvidia
from app.hardware.profile import GPUProblem, HardwareProfile

log = logging.getLogger("modeldeck.hardware")

# GPU backends, tried in this order; each answers for its own hardware and is empty where it does not apply.
GPU_DETECTORS: tuple[tuple[str, GPUDetector], ...] = (("nvidia", detect_nvidia), ("apple", detect_apple))


def disk_free(path: Path) -> int | None:
    """Free bytes on the file system that holds `path`, or would hold it: the nearest existing parent is asked."""
    path = path.absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError as exc:
                log.warning("cannot read free disk space of %s: %s", candidate, exc)
                return None
    return None


def _run(backend: str, detector: GPUDetector) -> GPUDetection:
    """A detector's answer. Each turns the failures it knows into problems; a failure it did not foresee is a bug,
    shown as a problem too so that one backend's bug does not take hardware detection (and the service) down."""
    try:
        return detector()
    except Exception as exc:  # a detector bug: logged with its traceback and reported, never swallowed
        log.exception("%s GPU detection failed", backend)
        problem = GPUProblem(
            backend,
            f"{backend} GPU detection failed unexpectedly: {exc!r}",
            "This is a ModelDeck bug: please report it with the output of `modeldeck hw --json`.",
        )
        return GPUDetection(problems=(problem,))


def detect_hardware(
    models_dir: Path,
    detectors: Sequence[tuple[str, GPUDetector]] = GPU_DETECTORS,
    bandwidth_cache: Path | None = None,
) -> HardwareProfile:
    """Everything the planner needs to know about this machine, with the models directory's free disk space.
    With `bandwidth_cache`, the system memory bandwidth is measured once and kept there."""
    found = [_run(backend, detector) for backend, detector in detectors]
    memory = detect_memory()
    cpu = detect_cpu()
    if bandwidth_cache is not None and cpu.memory_bandwidth is None:
        key = f"{cpu.model}|{cpu.logical_cores}|{memory.total}"
        cpu = dataclasses.replace(cpu, memory_bandwidth=cached_memory_bandwidth(bandwidth_cache, key))
    return HardwareProfile(
        cpu=cpu,
        ram_total=memory.total,
        ram_available=memory.available,
        gpus=tuple(gpu for result in found for gpu in result.gpus),
        unified_memory=any(result.unified_memory for result in found),
        metal=any(result.metal for result in found),
        driver_version=next((result.driver_version for result in found if result.driver_version), None),
        cuda_version=next((result.cuda_version for result in found if result.cuda_version), None),
        gpu_problems=tuple(problem for result in found for problem in result.problems),
        models_dir=str(models_dir),
        disk_free=disk_free(models_dir),
        os=platform.platform(),
    )
