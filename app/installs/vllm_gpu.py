"""Whether this machine can run vLLM at all: it ships CUDA builds only and needs compute capability 7.0 or newer."""

from __future__ import annotations

from app.hardware.detector import GPUDetection
from app.hardware.profile import GPUInfo

MIN_CAPABILITY = (7, 0)


def vllm_gpu_problem(detection: GPUDetection) -> str | None:
    """Why vLLM cannot run on the GPUs `detection` found, in one plain sentence; None when one of them can."""
    usable = [gpu for gpu in detection.gpus if _supported(gpu)]
    if usable:
        return None
    need = f"vLLM needs an NVIDIA GPU with compute capability >= {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}"
    nvidia = [gpu for gpu in detection.gpus if gpu.vendor == "nvidia"]
    if not nvidia:
        why = "; ".join(problem.problem for problem in detection.problems if problem.severity == "problem")
        return f"{need}; this machine has none" + (f" ({why})" if why else "")
    found = ", ".join(f"{gpu.name} ({_capability(gpu)})" for gpu in nvidia)
    return f"{need}; this machine has {found}"


def _supported(gpu: GPUInfo) -> bool:
    return gpu.vendor == "nvidia" and gpu.compute_capability is not None and gpu.compute_capability >= MIN_CAPABILITY


def _capability(gpu: GPUInfo) -> str:
    c = gpu.compute_capability
    return f"compute capability {c[0]}.{c[1]}" if c else "compute capability unknown"
