"""The engines of the service: one supervisor per model, started from a checked model file and a plan."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import asdict
from typing import Any

import psutil

from app.hub.library import ModelSpec
from app.paths import AppPaths
from app.planner.defaults import default_plan
from app.service.events import EventBus
from engines.gguf import GGUFError, read_gguf_info
from engines.registry import ENGINES
from engines.states import ACTIVE_STATES, EngineEvent, EngineState
from engines.supervisor import EngineSupervisor, SupervisorPolicy


def _rss(pid: int) -> int | None:
    try:
        rss: int = psutil.Process(pid).memory_info().rss
        return rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class UnknownModel(KeyError):
    """No model with that id is known."""


class EngineManager:
    """Owns every engine supervisor of the service, by model id."""

    def __init__(
        self,
        models: dict[str, ModelSpec],
        paths: AppPaths,
        bus: EventBus,
        policy: SupervisorPolicy | None = None,
    ) -> None:
        self.models = models
        self._paths = paths
        self._bus = bus
        self._policy = policy
        self._supervisors: dict[str, EngineSupervisor] = {}
        self._preflight_errors: dict[str, str] = {}  # model id -> why its file was refused
        # Engines accept only this key; it never leaves the service.
        self.internal_key = secrets.token_urlsafe(32)

    def supervisor(self, model_id: str) -> EngineSupervisor | None:
        return self._supervisors.get(model_id)

    def state(self, model_id: str) -> EngineState:
        return self._state_and_message(model_id)[0]

    def _state_and_message(self, model_id: str) -> tuple[EngineState, str]:
        if model_id in self._preflight_errors:
            return EngineState.FAILED, self._preflight_errors[model_id]
        supervisor = self._supervisors.get(model_id)
        return (supervisor.state, supervisor.message) if supervisor else (EngineState.STOPPED, "")

    async def start(self, model_id: str) -> EngineState:
        """Start the model's engine and wait until it is ready or failed. A bad model file fails at once."""
        spec = self.models.get(model_id)
        if spec is None:
            raise UnknownModel(model_id)
        supervisor = self._supervisors.get(model_id)
        if supervisor is None or supervisor.state not in ACTIVE_STATES:
            try:
                info = await asyncio.to_thread(read_gguf_info, spec.path)
            except GGUFError as exc:
                previous = self.state(model_id)
                self._preflight_errors[model_id] = str(exc)
                self._on_engine_event(EngineEvent(model_id, EngineState.FAILED, previous, str(exc)))
                return EngineState.FAILED
            self._preflight_errors.pop(model_id, None)
            plan = default_plan(model_id, info)
            engine = ENGINES[spec.engine]
            if supervisor is not None:
                await supervisor.stop()  # a failed one: reaps what is left and closes its log
            supervisor = EngineSupervisor(
                model_id,
                lambda port: engine.build_command(plan, port, self.internal_key),
                log_path=self._paths.engine_logs / f"{model_id}.log",
                records_dir=self._paths.engine_records,
                on_event=self._on_engine_event,
                on_log=self._on_engine_log,
                policy=self._policy,
            )
            self._supervisors[model_id] = supervisor
        return await supervisor.start()

    async def stop(self, model_id: str) -> None:
        if model_id not in self.models:
            raise UnknownModel(model_id)
        self._preflight_errors.pop(model_id, None)
        supervisor = self._supervisors.get(model_id)
        if supervisor is not None:
            await supervisor.stop()

    async def stop_all(self) -> None:
        await asyncio.gather(*(supervisor.stop() for supervisor in self._supervisors.values()))

    def describe(self, model_id: str) -> dict[str, Any]:
        """The model and its engine's state, as the control API and /v1/models report it."""
        spec = self.models[model_id]
        supervisor = self._supervisors.get(model_id)
        state, message = self._state_and_message(model_id)
        return {
            "id": spec.id,
            "name": spec.name,
            "path": str(spec.path),
            "size_bytes": spec.size_bytes,
            "source": spec.source,
            "engine": spec.engine,
            "state": str(state),
            "message": message,
            "pid": supervisor.pid if supervisor else None,
            "port": supervisor.port if supervisor and supervisor.pid else None,
            "restarts": supervisor.restarts if supervisor else 0,
            "rss_bytes": _rss(supervisor.pid) if supervisor and supervisor.pid else None,
        }

    def logs(self, model_id: str, count: int | None = None) -> list[str]:
        if model_id not in self.models:
            raise UnknownModel(model_id)
        supervisor = self._supervisors.get(model_id)
        return supervisor.log.tail(count) if supervisor else []

    def _on_engine_event(self, event: EngineEvent) -> None:
        self._bus.publish({"type": "engine", **asdict(event)})

    def _on_engine_log(self, model_id: str, line: str) -> None:
        self._bus.publish({"type": "log", "model_id": model_id, "line": line})
