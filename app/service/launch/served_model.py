"""What the engine manager knows of one model it serves from here, and how that is reported."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import psutil

from app import api_types as api
from app.hub.library import ModelSpec
from app.planner.calibration import CalibrationStore
from app.service.launch.admission import EngineQueue
from app.service.launch.folder_models import FolderLaunch, record_startup
from app.service.launch.overrides import plan_summary
from engines.base import LaunchPlan
from engines.diagnosis import Diagnosis
from engines.gguf import GGUFInfo
from engines.states import ACTIVE_STATES, EngineState
from engines.supervisor import EngineSupervisor, LaunchRecord
from engines.vllm_log import VLLMStartup


@dataclass
class ServedModel:
    """One model served from here: its supervisor, its current plan and what was checked for it, its queue and
    when it was last used. Created on first use; remote models have none."""

    engine_name: str | None = None  # the engine of its current plan, once it was started
    supervisor: EngineSupervisor | None = None
    preflight_error: str | None = None  # why its file or plan was refused at the last start
    info: GGUFInfo | None = None
    plan: LaunchPlan | None = None
    footprint: int | None = None  # predicted peak memory of its current plan
    queue: EngineQueue | None = None
    last_used: float = 0.0  # time.monotonic() of its last request or start
    start_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    startup: VLLMStartup | None = None  # what its engine said while starting (StartupLogEngine)
    folder: FolderLaunch | None = None  # the vLLM launch of a folder model
    calibrated: bool = False  # its current folder launch was recorded for calibration

    @property
    def active(self) -> bool:
        return self.supervisor is not None and self.supervisor.state in ACTIVE_STATES

    @property
    def idle(self) -> bool:
        return self.queue is None or (self.queue.running == 0 and self.queue.waiting == 0)

    def calibrate(self, calibration: CalibrationStore, model_id: str) -> None:
        """Once per launch of a folder model, when it is ready and its log has said its KV cache memory (in either
        order: the log is read while readiness is probed), its start-up goes to calibration."""
        folder, startup, supervisor = self.folder, self.startup, self.supervisor
        if folder is None or startup is None or supervisor is None or supervisor.state != EngineState.READY:
            return
        if not self.calibrated and record_startup(calibration, model_id, folder, startup):
            self.calibrated = True


def describe_served(
    spec: ModelSpec,
    served: ServedModel,
    engine_name: str,
    state: EngineState,
    message: str,
    memory: api.MemoryCheckRecord | None,
    idle_ttl_s: float | None,
    embedding_companion: api.CompanionRecord | None,
) -> api.ModelRecord:
    """The model and its engine's state, as the control API and /v1/models report it."""
    supervisor, queue, folder, startup = served.supervisor, served.queue, served.folder, served.startup
    return {
        "id": spec.id,
        "name": spec.name,
        "path": str(spec.path) if spec.path else spec.url,
        "size_bytes": spec.size_bytes,
        "source": spec.source,
        "engine": engine_name,
        "state": api.ModelState(state),
        "message": message,
        "pid": supervisor.pid if supervisor else None,
        "port": supervisor.port if supervisor and supervisor.pid else None,
        "restarts": supervisor.restarts if supervisor else 0,
        "diagnosis": _diagnosis(supervisor.diagnosis) if supervisor and supervisor.diagnosis else None,
        "rss_bytes": _rss(supervisor.pid) if supervisor and supervisor.pid else None,
        "running_requests": queue.running if queue else 0,
        "waiting_requests": queue.waiting if queue else 0,
        "memory": memory,
        # What a launch can override; a folder model's vLLM plan takes no overrides: see "vllm".
        "plan": plan_summary(served.plan) if served.plan and folder is None else None,
        "launch": _launch(supervisor.launch) if supervisor and supervisor.launch else None,  # secrets redacted
        "idle_ttl_s": idle_ttl_s,
        "startup": _startup(startup) if startup else None,
        "vllm": folder.describe(startup) if folder else None,
        "max_concurrent_requests": queue.capacity if queue else None,  # what the gateway lets through at once
        "embedding_companion": embedding_companion,
    }


def _diagnosis(diagnosis: Diagnosis) -> api.Diagnosis:
    return {"kind": diagnosis.kind, "summary": diagnosis.summary, "advice": diagnosis.advice}


def _launch(launch: LaunchRecord) -> api.LaunchRecord:
    return {"argv": list(launch.argv), "env": dict(launch.env)}


def _startup(startup: VLLMStartup) -> api.StartupRecord:
    return {
        "kv_cache_tokens": startup.kv_cache_tokens,
        "max_concurrency": startup.max_concurrency,
        "concurrency_length": startup.concurrency_length,
        "model_load_bytes": startup.model_load_bytes,
        "model_load_s": startup.model_load_s,
        "kv_cache_bytes": startup.kv_cache_bytes,
        "init_engine_s": startup.init_engine_s,
        "summary": startup.summary(),
    }


def _rss(pid: int) -> int | None:
    try:
        rss: int = psutil.Process(pid).memory_info().rss
        return rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
