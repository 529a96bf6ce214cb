"""A HardwareProfile as a few lines a person reads: what `modeldeck hw` prints."""

from __future__ import annotations

import textwrap

from app.byte_size import format_bytes
from app.hardware.profile import CPUInfo, GPUInfo, GPUProblem, HardwareProfile

LABEL_WIDTH = 9
WRAP_WIDTH = 100  # problems and advice are sentences: wrapped for a terminal


def _gib(size: int) -> str:
    return format_bytes(size)


def _cpu_line(cpu: CPUInfo) -> str:
    cores = f"{cpu.physical_cores} physical / " if cpu.physical_cores else ""
    features = f"; {' '.join(cpu.features)}" if cpu.features else ""
    bandwidth = f", memory {cpu.memory_bandwidth / 1e9:.0f} GB/s measured" if cpu.memory_bandwidth else ""
    return (
        f"{cpu.model or 'unknown model'} ({cpu.architecture}), {cores}{cpu.logical_cores} logical cores"
        f"{bandwidth}{features}"
    )


def _gpu_line(gpu: GPUInfo, unified: bool) -> str:
    if gpu.memory_free is not None:
        memory = f"{_gib(gpu.memory_free)} free of {_gib(gpu.memory_total)}"
    else:
        memory = f"{_gib(gpu.memory_total)} {'unified memory' if unified else 'memory'}"
    details = [memory]
    if gpu.compute_capability:
        details.append("compute capability {}.{}".format(*gpu.compute_capability))
    if gpu.mig_enabled:
        details.append("MIG mode on")
    if gpu.memory_bandwidth:
        details.append(f"{gpu.memory_bandwidth / 1e9:.0f} GB/s")
    return f"{gpu.name}: {', '.join(details)}"


def _problem_lines(problem: GPUProblem) -> list[str]:
    label = "Note" if problem.severity == "note" else "Problem"
    return [_row(label, f"{problem.backend}: {problem.problem}", wrap=True), _row("", problem.advice, wrap=True)]


def _row(label: str, text: str, wrap: bool = False) -> str:
    first = f"{label:<{LABEL_WIDTH}}"
    if not wrap:
        return first + text
    return textwrap.fill(text, WRAP_WIDTH, initial_indent=first, subsequent_indent=" " * LABEL_WIDTH)


def format_profile(profile: HardwareProfile) -> str:
    """The profile in a handful of lines: CPU, RAM, each GPU, driver, disk, OS, then any GPU problems."""
    lines = [
        _row("CPU", _cpu_line(profile.cpu)),
        _row("RAM", f"{_gib(profile.ram_available)} available of {_gib(profile.ram_total)}"),
    ]
    lines += [_row(f"GPU {gpu.index}", _gpu_line(gpu, profile.unified_memory)) for gpu in profile.gpus]
    if not profile.gpus:
        lines.append(_row("GPU", "none found: models run on the CPU"))
    if profile.metal:
        lines.append(_row("Metal", "available"))
    if profile.driver_version:
        cuda = f", CUDA {profile.cuda_version}" if profile.cuda_version else ""
        lines.append(_row("Driver", f"NVIDIA {profile.driver_version}{cuda}"))
    if profile.disk_free is not None:
        lines.append(_row("Disk", f"{_gib(profile.disk_free)} free for models in {profile.models_dir}"))
    if profile.os:
        lines.append(_row("OS", profile.os))
    for problem in profile.gpu_problems:
        lines += _problem_lines(problem)
    return "\n".join(lines)
