"""What the control API answers about this machine and how to run a model on it: the hardware profile, detected
off the event loop and kept for a few seconds, and the planner's recommendation with its exact command lines,
corrected by what earlier launches measured."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from app.hardware.detect import detect_hardware
from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec
from app.installs.available import available_engines
from app.paths import AppPaths
from app.planner.calibration import CalibrationStore
from app.planner.plans import detect_engines, plan_model, variants_of
from app.planner.recommend import Recommendation, Variant
from app.quality.expected import Lookup, quality_lookup
from engines.base import Engine, Installation

# NVML and /proc answer in milliseconds, but a wizard asks on every page: a few seconds of reuse keeps free
# memory current while sparing the detection.
HARDWARE_TTL_S = 5.0
INSTALLATIONS_TTL_S = 300.0  # an engine installed meanwhile shows up within five minutes

Detector = Callable[[Path], HardwareProfile]


class Advisor:
    """Answers /api/hardware and /api/recommend. Blocking work (detection, model headers, SQLite) runs on threads."""

    def __init__(self, paths: AppPaths, detect: Detector | None = None, ttl_s: float = HARDWARE_TTL_S) -> None:
        self._paths = paths
        self._detect = detect or (lambda models_dir: detect_hardware(models_dir, bandwidth_cache=paths.bandwidth_cache))
        self._ttl_s = ttl_s
        self._calibration = CalibrationStore(paths.calibration_db)
        self._profile: HardwareProfile | None = None
        self._detected_at = 0.0
        self._lock = asyncio.Lock()
        self._installed: dict[str, Installation] | None = None
        self._installed_at = 0.0
        self._installations_lock = threading.Lock()  # recommendations run on worker threads

    async def hardware(self) -> HardwareProfile:
        """This machine's profile; requests within the TTL share one detection."""
        async with self._lock:
            if self._profile is None or time.monotonic() - self._detected_at > self._ttl_s:
                self._profile = await asyncio.to_thread(self._detect, self._paths.models_dir)
                self._detected_at = time.monotonic()
            return self._profile

    async def recommend(self, spec: ModelSpec, use: str, users: int | None) -> Recommendation:
        """The ranked options for `spec`, each with its command line. Raises NoVariants or GGUFError for a model
        the planner cannot read."""
        hardware = await self.hardware()
        return await asyncio.to_thread(self._recommend, hardware, spec, use, users)

    def _recommend(self, hardware: HardwareProfile, spec: ModelSpec, use: str, users: int | None) -> Recommendation:
        engines = available_engines(self._paths)
        installations = self._installations(engines)
        return plan_model(hardware, spec.id, variants_of(spec), use, users, self._calibration, engines, installations,
                          *self._quality())  # fmt: skip

    async def plan(self, model_id: str, variants: list[Variant], use: str = "chat") -> Recommendation:
        """The ranked options for variants not in the library (a Hub model's, costed from a header read remotely)."""
        hardware = await self.hardware()
        engines = available_engines(self._paths)
        return await asyncio.to_thread(
            lambda: plan_model(
                hardware, model_id, variants, use, None, self._calibration, engines, self._installations(engines),
                *self._quality(),
            )
        )  # fmt: skip

    def _quality(self) -> tuple[Lookup, float | None]:
        """Each variant's expected quality loss from the saved quality cards, and the user's threshold."""
        return quality_lookup(self._paths)

    async def engines(self) -> dict[str, Installation]:
        """Which engines are installed here, their versions and where (a portable llama-server: its CPU variant)."""
        return await asyncio.to_thread(lambda: self._installations(available_engines(self._paths)))

    def forget_installations(self) -> None:
        """Detect the engines again at the next question: one was just built or installed."""
        with self._installations_lock:
            self._installed = None

    def _installations(self, engines: Mapping[str, Engine]) -> dict[str, Installation]:
        """Each engine's detection, kept for a while: `vllm --version` alone takes seconds (it imports torch)."""
        with self._installations_lock:
            if self._installed is None or time.monotonic() - self._installed_at > INSTALLATIONS_TTL_S:
                self._installed = detect_engines(engines)
                self._installed_at = time.monotonic()
            return self._installed
