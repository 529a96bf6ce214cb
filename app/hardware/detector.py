"""What one GPU detector returns: the devices it found, or why it could not look, and the facts around them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.hardware.profile import GPUInfo, GPUProblem


@dataclass(frozen=True)
class GPUDetection:
    """One backend's answer. An empty one means the backend does not apply to this machine."""

    gpus: tuple[GPUInfo, ...] = ()
    problems: tuple[GPUProblem, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    unified_memory: bool = False
    metal: bool = False


GPUDetector = Callable[[], GPUDetection]
