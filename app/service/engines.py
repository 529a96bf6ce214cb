"""The engines of the service: one supervisor per model, started from a checked model file and a plan,
with a queue in front of each, idle engines stopped after a TTL, and a memory cap enforced by stopping the
least recently used idle engine before a start that would not fit."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict

from app.api_types import ModelRecord
from app.hardware.detect import detect_hardware
from app.hardware.nvidia import process_vram
from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec
from app.paths import AppPaths
from app.planner.facts import facts_from_gguf
from app.service.events import EventBus
from app.service.launch.admission import EngineQueue
from app.service.launch.companions import EmbeddingCompanions, EmbeddingRoute, companion_plan, own_limit
from app.service.launch.lifecycle import IDLE_CHECK_MIN_S, LifecyclePolicy, supervisor_policy
from app.service.launch.memory_cap import LoadedEngine, room_for
from app.service.launch.overrides import PlanOverrides
from app.service.launch.planning import LaunchPlanner, LaunchRefused, running_plan_conflict
from app.service.launch.route import Route
from app.service.launch.served_model import ServedModel, describe_served
from app.service.remotes import RemoteEndpoint, RemoteModel, RemoteTable
from engines.base import EmbeddingModeEngine, Engine, StartupLogEngine
from engines.registry import ENGINES
from engines.states import EngineState, StateChange
from engines.supervisor import CommandFactory, EngineSupervisor, EventSink, LogSink, SupervisorPolicy
from engines.vllm_log import VLLMStartup


class UnknownModel(KeyError):
    """No model with that id is known."""


class PlanConflict(Exception):
    """The model's engine is running with other launch parameters; it must be stopped before they change."""


class EngineManager:
    """Owns every engine supervisor of the service, one record per model id."""

    def __init__(
        self,
        models: dict[str, ModelSpec],
        paths: AppPaths,
        bus: EventBus,
        policy: SupervisorPolicy | None = None,
        lifecycle: LifecyclePolicy | None = None,
        engines: Mapping[str, Engine] | None = None,
        hardware: Callable[[], HardwareProfile] | None = None,
    ) -> None:
        self.models = models
        self._paths = paths
        self._bus = bus
        self._policy = policy
        self.lifecycle = lifecycle or LifecyclePolicy()
        hardware = hardware or (lambda: detect_hardware(paths.models_dir))
        self.planner = LaunchPlanner(paths, engines if engines is not None else ENGINES, hardware, models)
        self.engines = self.planner.engines
        self._records: dict[str, ServedModel] = {}
        # Engines accept only this key; it never leaves the service.
        self.internal_key = secrets.token_urlsafe(32)
        self.companions = EmbeddingCompanions(self._engine_supervisor, self.internal_key, bus.publish)
        self._companion_stops: set[asyncio.Task[None]] = set()
        self.remotes = RemoteTable()

    def _record(self, model_id: str) -> ServedModel:
        record = self._records.get(model_id)
        if record is None:
            record = self._records[model_id] = ServedModel()
        return record

    def add_remote(self, remote: RemoteEndpoint, specs: dict[str, ModelSpec]) -> None:
        """Serve a remote's models (replacing what it listed before)."""
        self.remove_remote(remote.name)
        self.remotes.add(remote, tuple(specs))
        self.models.update(specs)

    def remove_remote(self, name: str) -> None:
        for model_id in self.remotes.remove(name):
            self.models.pop(model_id, None)

    def remote_of(self, model_id: str) -> RemoteModel | None:
        """The remote serving `model_id` and the model's id there, or None for a model served here."""
        return self.remotes.model(model_id)

    def served_elsewhere(self, model_id: str) -> str | None:
        """What serves `model_id` outside this machine's library ("remote NAME", "the --upstream server at URL"),
        None for a model ModelDeck serves from a file or folder here (or an unknown one)."""
        remote = self.remote_of(model_id)
        if remote is not None:
            return f"remote {remote.endpoint.name}"
        spec = self.models.get(model_id)
        return None if spec is None or spec.url is None else f"the --upstream server at {spec.url}"

    def upstream_bearer(self, model_id: str) -> str:
        """The key the gateway sends upstream: a remote's own (possibly none), none to an --upstream server (it runs
        outside ModelDeck, and the internal key must not leave the service), else the engines' internal key."""
        remote = self.remote_of(model_id)
        if remote is not None:
            return remote.endpoint.api_key or ""
        spec = self.models.get(model_id)
        return "" if spec is not None and spec.url is not None else self.internal_key

    def route(self, model_id: str) -> Route:
        """Where a request for the model goes now, its URL None until its engine is ready; notes the model as used
        (for the idle TTL and least-recently-used eviction). Raises KeyError for an unknown model."""
        spec, remote = self.models[model_id], self.remotes.model(model_id)
        engine, queue = self.engine(model_id), self.queue(model_id)
        self.touch(model_id)
        return Route(
            model=model_id,
            upstream_model=remote.upstream_id if remote else model_id,
            url=self.base_url(model_id),
            bearer=self.upstream_bearer(model_id),
            queue=queue,
            engine_name=self.engine_name(model_id),
            capabilities=engine.capabilities,
            chat_template=self.chat_template(model_id),
            remote=remote.endpoint.name if remote else None,
            external=spec.url is not None,
            slot_count=queue.capacity if engine.capabilities.slot_ids and remote is None else 0,
        )

    def supervisor(self, model_id: str) -> EngineSupervisor | None:
        record = self._records.get(model_id)
        return record.supervisor if record else None

    def engine_name(self, model_id: str) -> str:
        """The engine that serves the model: the one its last start chose; before its first start, the one a start
        without parameters would choose (LaunchPlanner.engine_before_start), so that a JIT start's first request is
        checked and adapted for the engine that will serve it. Never blocks."""
        record = self._records.get(model_id)
        if record is not None and record.engine_name is not None:
            return record.engine_name
        return self.planner.engine_before_start(self.models[model_id])

    def engine(self, model_id: str) -> Engine:
        return self.engines[self.engine_name(model_id)]

    def _capacity(self, model_id: str) -> int:
        capabilities, record = self.engine(model_id).capabilities, self._record(model_id)
        if record.folder is not None:
            return min(capabilities.max_concurrency, record.folder.capacity(record.startup))
        if capabilities.parallel_from_plan:
            return max(1, min(record.plan.parallel if record.plan else 1, capabilities.max_concurrency))
        return capabilities.max_concurrency

    def queue(self, model_id: str) -> EngineQueue:
        record = self._record(model_id)
        if record.queue is None:
            record.queue = EngineQueue(self._capacity(model_id), self.lifecycle.max_waiting)
        return record.queue

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        return {model_id: (r.queue.running, r.queue.waiting) for model_id, r in self._records.items() if r.queue}

    def context_length(self, model_id: str) -> int | None:
        """The context max_tokens is bounded by; None for a remote, which judges its own requests."""
        if self.remotes.model(model_id) is not None:
            return None
        record = self._records.get(model_id)
        plan, info = (record.plan, record.info) if record else (None, None)
        if plan is None:
            spec = self.models.get(model_id)
            return self.planner.context_before_start(spec, self.engine_name(model_id) if spec else "")
        trained = info.context_length if info is not None else None
        # llama-server lets one slot use the whole shared context, up to the trained context.
        return min(plan.context_length, trained) if trained else plan.context_length

    def chat_template(self, model_id: str) -> str | None:
        record = self._records.get(model_id)
        template = record.info.metadata.get("tokenizer.chat_template") if record and record.info else None
        return template if isinstance(template, str) else None

    def touch(self, model_id: str) -> None:
        """Note that the model was just used (for the idle TTL and least-recently-used eviction)."""
        self._record(model_id).last_used = time.monotonic()

    def state(self, model_id: str) -> EngineState:
        return self._state_and_message(model_id)[0]

    def base_url(self, model_id: str) -> str | None:
        """Where the model's server answers, if it is ready."""
        spec = self.models[model_id]
        if spec.url is not None:
            return spec.url
        supervisor = self.supervisor(model_id)
        return supervisor.base_url if supervisor and supervisor.state == EngineState.READY else None

    async def embedding_target(self, model_id: str, url: str) -> EmbeddingRoute:
        """Where /v1/embeddings for the model goes, once its engine is ready at `url`: there, unless that engine
        embeds only in a process of its own (app.service.launch.companions), which is then started on demand."""
        engine, spec, record = self.engine(model_id), self.models[model_id], self._record(model_id)
        plan, info = record.plan, record.info
        if not isinstance(engine, EmbeddingModeEngine) or plan is None or info is None or spec.url is not None:
            return EmbeddingRoute(url, limit=own_limit(engine, plan) if spec.url is None else None)
        if self.state(model_id) != EngineState.READY:  # stopped while the request waited: nothing to start beside
            return EmbeddingRoute(None, f"The model `{model_id}` stopped before its embeddings could be made.")
        footprint = self.planner.footprint(spec, info, companion_plan(plan), engine.name, embedding_process=True)
        return await self.companions.route(model_id, engine, plan, footprint, self._room_next_to)

    async def _room_next_to(self, model_id: str, extra: int) -> str | None:
        need = self._loaded_bytes(model_id) + extra
        return await self._free_memory(model_id, need, f"{model_id} with its embedding process")

    async def engine_refused(self, model_id: str) -> bool:
        """The model's engine refused a connection: True if its process turns out to have exited (its
        supervisor then restarts it, and start() waits for that); False for an external server."""
        supervisor = self.supervisor(model_id)
        return supervisor is not None and await supervisor.wait_exited(timeout_s=2.0)

    def _state_and_message(self, model_id: str) -> tuple[EngineState, str]:
        url = self.models[model_id].url
        if url is not None:
            remote = self.remote_of(model_id)
            return (
                EngineState.READY,
                f"remote {remote.endpoint.name} at {url}" if remote else f"external server at {url}",
            )
        record = self._records.get(model_id)
        if record is None:
            return EngineState.STOPPED, ""
        if record.preflight_error is not None:
            return EngineState.FAILED, record.preflight_error
        supervisor = record.supervisor
        return (supervisor.state, supervisor.message) if supervisor else (EngineState.STOPPED, "")

    async def check_start(self, model_id: str, overrides: PlanOverrides | None) -> None:
        """Raise what `start` with these overrides would refuse, before anything starts: UnknownModel,
        BadOverrides (out of the model's bounds) or PlanConflict (running with other parameters)."""
        spec = self.models.get(model_id)
        if spec is None:
            raise UnknownModel(model_id)
        if overrides is None:
            return
        await self.planner.check_overrides(spec, overrides)
        if spec.path is not None and not spec.path.is_dir():
            self._check_running_plan(model_id, overrides)

    def _check_running_plan(self, model_id: str, overrides: PlanOverrides) -> None:
        record = self._record(model_id)
        if record.active and record.plan is not None:
            conflict = running_plan_conflict(model_id, record.plan, record.info, self.engine_name(model_id), overrides)
            if conflict is not None:
                raise PlanConflict(conflict)

    async def start(self, model_id: str, overrides: PlanOverrides | None = None) -> EngineState:
        """Start the model's engine and wait until it is ready or failed. A bad model file fails at once.

        `overrides` replace parts of the default plan; a running engine is never restarted for them (PlanConflict).
        """
        spec = self.models.get(model_id)
        if spec is None:
            raise UnknownModel(model_id)
        if spec.url is not None:
            return EngineState.READY
        self.touch(model_id)
        record = self._record(model_id)
        async with record.start_lock:
            supervisor = record.supervisor
            if supervisor is None or not record.active:
                if overrides is None:  # a JIT start, `--model`, a plain Launch: the settings saved for the model
                    overrides = await asyncio.to_thread(self.planner.model_settings.get, model_id)
                supervisor = await self._new_supervisor(spec, supervisor, overrides)
                if supervisor is None:
                    return EngineState.FAILED
            elif overrides is not None:
                self._check_running_plan(model_id, overrides)
        return await supervisor.start()

    async def _new_supervisor(
        self, spec: ModelSpec, old: EngineSupervisor | None, overrides: PlanOverrides | None
    ) -> EngineSupervisor | None:
        model_id = spec.id
        record = self._record(model_id)
        try:
            prepared = await self.planner.prepare(spec, overrides)
        except LaunchRefused as exc:
            self._refuse(model_id, str(exc))
            return None
        record.preflight_error = None
        record.footprint = prepared.footprint
        if not await self._make_room(spec):
            return None
        plan = record.plan = prepared.plan
        record.engine_name = prepared.engine_name
        if prepared.info is not None:
            record.info = prepared.info
        record.folder, record.startup, record.calibrated = prepared.folder, None, False
        engine = self.engine(model_id)
        if record.queue is not None:
            record.queue.set_capacity(self._capacity(model_id))
        if old is not None:
            await old.stop()  # a failed one: reaps what is left and closes its log
        supervisor = self._engine_supervisor(
            model_id, lambda port: engine.build_command(plan, port, self.internal_key), self._on_engine_event,
            self._on_engine_log, supervisor_policy(self._policy, engine.capabilities),
        )  # fmt: skip
        record.supervisor = supervisor
        return supervisor

    def _engine_supervisor(
        self,
        name: str,
        command: CommandFactory,
        on_event: EventSink,
        on_log: LogSink | None = None,
        policy: SupervisorPolicy | None = None,
    ) -> EngineSupervisor:
        """A supervisor for one engine process of the service, its log in `<logs>/engines/<name>.log`."""
        return EngineSupervisor(
            name,
            command,
            log_path=self._paths.engine_logs / f"{name}.log",
            records_dir=self._paths.engine_records,
            on_event=on_event,
            on_log=on_log,
            policy=policy or self._policy,
            gpu_memory_probe=process_vram,  # a stop returns once the GPU memory is free (at once without NVIDIA)
        )

    def _refuse(self, model_id: str, message: str) -> None:
        previous = self.state(model_id)
        self._record(model_id).preflight_error = message
        self._on_engine_event(StateChange(model_id, EngineState.FAILED, previous, message))

    def _loaded(self, excluding: str) -> list[str]:
        return [m for m, record in self._records.items() if m != excluding and record.active]

    async def _make_room(self, spec: ModelSpec) -> bool:
        """Stop least recently used idle engines until `spec` fits under the memory cap (predicted peaks)."""
        problem = await self._free_memory(spec.id, self._record(spec.id).footprint or spec.size_bytes)
        if problem is not None:
            self._refuse(spec.id, problem)
        return problem is None

    async def _free_memory(self, model_id: str, need: int, what: str | None = None) -> str | None:
        """Stop least recently used idle engines other than `model_id`'s until `need` bytes (for `what`, the model
        by default) fit under the memory cap next to the rest; why they cannot, if they cannot."""
        while True:
            loaded = [LoadedEngine(m, self._loaded_bytes(m), self._records[m].idle, self._records[m].last_used)
                      for m in self._loaded(model_id)]  # fmt: skip
            verdict = room_for(need, self.lifecycle.max_loaded_bytes, loaded, what or model_id)
            if verdict.stop is None:
                return verdict.problem
            await self._stop_for(verdict.stop, f"stopped to make room for {model_id}")

    def _loaded_bytes(self, model_id: str) -> int:
        """The predicted peak memory of the model's engine, and of its embedding companion if one runs."""
        record = self._records.get(model_id)
        engine = record.footprint if record and record.footprint is not None else self.models[model_id].size_bytes
        return engine + self.companions.footprint(model_id)

    async def _stop_for(self, model_id: str, reason: str) -> None:
        supervisor = self._records[model_id].supervisor
        assert supervisor is not None, "only loaded engines are stopped for a reason"
        await asyncio.gather(supervisor.stop(reason), self.companions.stop(model_id))

    async def stop_idle_engines(self) -> None:
        """Stop ready engines unused for longer than their idle TTL, until cancelled."""
        shortest = self.lifecycle.shortest_ttl()
        if shortest is None:
            return
        while True:
            await asyncio.sleep(min(1.0, max(IDLE_CHECK_MIN_S, shortest / 4)))
            now = time.monotonic()
            for model_id in self._loaded(excluding=""):
                ttl, idle_for = self.lifecycle.ttl_for(model_id), now - self._records[model_id].last_used
                record = self._records[model_id]
                idle = record.supervisor is not None and record.supervisor.state == EngineState.READY and record.idle
                if ttl is not None and idle and idle_for > ttl:
                    await self._stop_for(model_id, f"stopped after {idle_for:.0f} s idle (TTL {ttl:g} s)")

    async def stop(self, model_id: str) -> None:
        if model_id not in self.models:
            raise UnknownModel(model_id)
        record = self._records.get(model_id)
        if record is None:
            return
        record.preflight_error = None
        if record.supervisor is not None:
            await asyncio.gather(record.supervisor.stop(), self.companions.stop(model_id))

    async def stop_all(self) -> None:
        supervisors = [record.supervisor for record in self._records.values() if record.supervisor is not None]
        await asyncio.gather(*(supervisor.stop() for supervisor in supervisors), self.companions.stop_all())

    def describe(self, model_id: str) -> ModelRecord:
        """The model and its engine's state, as the control API and /v1/models report it."""
        spec = self.models.get(model_id)
        if spec is None:
            raise UnknownModel(model_id)
        state, message = self._state_and_message(model_id)
        return describe_served(
            spec, self._records.get(model_id) or ServedModel(), self.engine_name(model_id), state, message,
            self.planner.memory_check.describe(model_id),
            None if spec.url is not None else self.lifecycle.ttl_for(model_id), self.companions.describe(model_id),
        )  # fmt: skip

    def logs(self, model_id: str, count: int | None = None) -> list[str]:
        if model_id not in self.models:
            raise UnknownModel(model_id)
        supervisor = self.supervisor(model_id)
        return supervisor.log.tail(count) if supervisor else []

    def request_finished(self, model_id: str) -> None:
        """A request for the model was answered (or given up): it was used until now."""
        self.touch(model_id)
        self.planner.memory_check.request_finished(model_id)

    def _on_engine_event(self, event: StateChange) -> None:
        record = self._records.get(event.model_id)
        info, plan = (record.info, record.plan) if record else (None, None)
        if event.state == EngineState.READY and event.pid and info and plan:
            engine = self.engine_name(event.model_id)
            self.planner.memory_check.engine_ready(event.model_id, engine, facts_from_gguf(info), plan, event.pid)
        if event.state == EngineState.READY:
            self._record(event.model_id).calibrate(self.planner.calibration, event.model_id)
        if event.state == EngineState.FAILED and self.companions.describe(event.model_id) is not None:
            stopping = asyncio.create_task(self.companions.stop(event.model_id))  # the model is down: it goes too
            self._companion_stops.add(stopping)
            stopping.add_done_callback(self._companion_stops.discard)
        self._bus.publish({"type": "engine", **asdict(event)})

    def _on_engine_log(self, model_id: str, line: str) -> None:
        engine = self.engine(model_id)
        if isinstance(engine, StartupLogEngine):
            record = self._record(model_id)
            before = record.startup or VLLMStartup()
            after = engine.read_startup_line(before, line)
            if after is not before:
                record.startup = after
                self._bus.publish({"type": "startup", "model_id": model_id, **after.to_dict()})
                if record.queue is not None and record.folder is not None:
                    record.queue.set_capacity(self._capacity(model_id))
                record.calibrate(self.planner.calibration, model_id)
        self._bus.publish({"type": "log", "model_id": model_id, "line": line})


__all__ = ["EngineManager", "PlanConflict", "UnknownModel"]
