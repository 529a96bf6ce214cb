"""Checks the memory model against each launch: predicted memory beside what the engine really uses once it is
ready and after its first request, recorded for calibration and shown to the user."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psutil

from app.api_types import MemoryCheckRecord
from app.hardware.nvidia import process_vram
from app.planner.calibration import CalibrationStore, Correction, Measurement
from app.planner.facts import ModelFacts
from app.planner.memory import MemoryEstimate, MissingFacts, plan_memory
from engines.base import LaunchPlan

log = logging.getLogger("modeldeck.calibration")


def tree_rss(pid: int) -> int | None:
    """Resident memory of a process and its children (the exec wrapper's engine, vLLM's workers)."""
    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in (root, *root.children(recursive=True)))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def tree_pids(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {root.pid, *(child.pid for child in root.children(recursive=True))}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return set()


@dataclass(frozen=True)
class _Launch:
    engine: str
    facts: ModelFacts
    plan: LaunchPlan
    predicted: MemoryEstimate  # the model's figure, before any correction
    shown: MemoryEstimate  # what the user was told: corrected by earlier launches
    pid: int


class MemoryCheck:
    """Per model: the launch being checked, and its latest measurement."""

    def __init__(self, store: CalibrationStore) -> None:
        self._store = store
        self._launches: dict[str, _Launch] = {}
        self._measured: dict[str, dict[str, Measurement]] = {}  # model id -> phase -> measurement

    def correction(self, engine: str, architecture: str | None) -> Correction:
        """What earlier launches of this engine and architecture teach about the runtime part of a prediction."""
        return self._store.correction(engine, architecture)

    def engine_ready(self, model_id: str, engine: str, facts: ModelFacts, plan: LaunchPlan, pid: int) -> None:
        """Predict the plan's memory and measure the engine now that it has loaded."""
        try:
            predicted = plan_memory(engine, facts, plan)
        except MissingFacts as exc:
            log.info("no memory prediction for %s: %s", model_id, exc)
            return
        self._measured[model_id] = {}
        shown = self._store.correction(engine, facts.architecture).apply(predicted)
        self._launches[model_id] = _Launch(engine, facts, plan, predicted, shown, pid)
        self._measure(model_id, "ready")

    def request_finished(self, model_id: str) -> None:
        """After the first request of a launch the compute buffers have been touched: measure once more."""
        phases = self._measured.get(model_id, {})
        if "ready" in phases and "first_request" not in phases:
            self._measure(model_id, "first_request")

    def _measure(self, model_id: str, phase: str) -> None:
        launch = self._launches[model_id]
        rss = tree_rss(launch.pid)
        if rss is None:
            return
        vram = process_vram(tree_pids(launch.pid)) if launch.plan.gpu_layers else None
        measurement = self._store.record(
            Measurement(
                engine=launch.engine,
                architecture=launch.facts.architecture or "unknown",
                model_id=model_id,
                context=launch.plan.context_length,
                gpu_layers=launch.plan.gpu_layers,
                phase=phase,
                predicted_ram=launch.predicted.ram_at_load if phase == "ready" else launch.predicted.ram,
                predicted_vram=launch.predicted.vram,
                measured_ram=rss,
                measured_vram=vram,
            )
        )
        self._measured[model_id][phase] = measurement
        log.info(
            "%s memory %s: predicted %.0f MiB, measured %.0f MiB", model_id, phase,
            (launch.shown.ram + launch.shown.vram) / 2**20, (rss + (vram or 0)) / 2**20,
        )  # fmt: skip

    def describe(self, model_id: str) -> MemoryCheckRecord | None:
        """The check for the model listing: predicted and measured memory at load with the error, and after the
        first request whether the measurement stays under the predicted peak."""
        launch, phases = self._launches.get(model_id), self._measured.get(model_id, {})
        if launch is None or "ready" not in phases:
            return None
        at_load, after = phases["ready"], phases.get("first_request")
        predicted_at_load = launch.shown.ram_at_load + launch.shown.vram
        measured_at_load = at_load.measured_ram + (at_load.measured_vram or 0)
        peak = launch.shown.ram + launch.shown.vram
        measured_after = after.measured_ram + (after.measured_vram or 0) if after else None
        return {
            "predicted_at_load_bytes": predicted_at_load,
            "measured_at_load_bytes": measured_at_load,
            "error_at_load": round((predicted_at_load - measured_at_load) / measured_at_load, 4),
            "predicted_peak_bytes": peak,
            "measured_after_request_bytes": measured_after,
            "within_peak": None if measured_after is None else measured_after <= peak,
            "parts": {part.name: part.ram + part.vram for part in launch.shown.parts},
        }
