"""The engines of the service: one supervisor per model, started from a checked model file and a plan,
with a queue in front of each, idle engines stopped after a TTL, and a memory cap enforced by stopping the
least recently used idle engine before a start that would not fit."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import psutil

from app.hardware.detect import detect_hardware
from app.hardware.nvidia import process_vram
from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec
from app.paths import AppPaths
from app.planner.calibration import CalibrationStore
from app.planner.defaults import DEFAULT_CONTEXT, LLAMA_CPP_PYTHON, LLAMA_SERVER, default_plan, spin_wait_fits
from app.planner.facts import facts_from_gguf
from app.planner.memory import MissingFacts, llama_cpp_memory, plan_memory
from app.service.admission import EngineQueue
from app.service.companions import EmbeddingCompanions, EmbeddingRoute, companion_plan
from app.service.events import EventBus
from app.service.folder_models import FolderLaunch, FolderRefused, overrides_refusal, plan_folder, record_startup
from app.service.memory_check import MemoryCheck
from app.service.model_settings import ModelSettingsStore
from app.service.overrides import BadOverrides, PlanOverrides, plan_summary
from engines.base import Capabilities, EmbeddingModeEngine, Engine, LaunchPlan
from engines.gguf import GGUFError, GGUFInfo, read_gguf_info
from engines.registry import ENGINES
from engines.states import ACTIVE_STATES, EngineEvent, EngineState
from engines.supervisor import CommandFactory, EngineSupervisor, EventSink, LogSink, SupervisorPolicy
from engines.vllm_log import VLLMStartup, parse_line


def _rss(pid: int) -> int | None:
    try:
        rss: int = psutil.Process(pid).memory_info().rss
        return rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class UnknownModel(KeyError):
    """No model with that id is known."""


class PlanConflict(Exception):
    """The model's engine is running with other launch parameters; it must be stopped before they change."""


@dataclass(frozen=True)
class LifecyclePolicy:
    """When engines are stopped without being asked. None: never."""

    idle_ttl_s: float | None = None  # the default for every model
    max_loaded_bytes: int | None = None  # against the planner's predicted peak of each engine's plan
    max_waiting: int = 32  # requests waiting per engine before 429
    model_ttl_s: Mapping[str, float | None] = field(default_factory=dict)  # model id -> its own idle TTL
    max_loaded_source: str = "--max-memory"  # where max_loaded_bytes comes from (app.service.memory_budget)

    def ttl_for(self, model_id: str) -> float | None:
        """The idle TTL of one model: its own if it has one, else the default."""
        return self.model_ttl_s.get(model_id, self.idle_ttl_s)

    def shortest_ttl(self) -> float | None:
        ttls = [ttl for ttl in (self.idle_ttl_s, *self.model_ttl_s.values()) if ttl is not None]
        return min(ttls) if ttls else None


@dataclass(frozen=True)
class RemoteEndpoint:
    """An OpenAI-compatible server elsewhere whose models are served as `name/<model>` (app.service.remotes)."""

    name: str
    url: str  # base URL, without /v1
    api_key: str | None
    models: tuple[str, ...]  # their ids at the remote


@dataclass(frozen=True)
class _Prepared:
    """A checked start: the plan, its engine and predicted peak memory, with the GGUF header or the vLLM launch."""

    plan: LaunchPlan
    engine_name: str
    footprint: int
    info: GGUFInfo | None = None
    folder: FolderLaunch | None = None


class EngineManager:
    """Owns every engine supervisor of the service, by model id."""

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
        # Every engine by name, installed or not (app.installs.available); each model's spec names its default.
        self.engines: Mapping[str, Engine] = engines if engines is not None else ENGINES
        self._engine_names: dict[str, str] = {}  # model id -> the engine of its current plan, when not its default
        self._supervisors: dict[str, EngineSupervisor] = {}
        self._preflight_errors: dict[str, str] = {}  # model id -> why its file was refused
        self._infos: dict[str, GGUFInfo] = {}
        self._plans: dict[str, LaunchPlan] = {}
        self._footprints: dict[str, int] = {}  # model id -> predicted peak memory of its current plan
        self._queues: dict[str, EngineQueue] = {}
        self._last_used: dict[str, float] = {}
        self._start_locks: dict[str, asyncio.Lock] = {}
        self._startups: dict[str, VLLMStartup] = {}  # model id -> what its vLLM said while starting
        self._calibration = CalibrationStore(paths.calibration_db)
        self.memory_check = MemoryCheck(self._calibration)
        self.model_settings = ModelSettingsStore(paths.config)  # per-model load settings for starts that name none
        # This machine's profile for planning folder models (blocking: called on a worker thread).
        self._hardware = hardware or (lambda: detect_hardware(paths.models_dir))
        self._folders: dict[str, FolderLaunch] = {}  # model id -> the vLLM launch of its folder
        self._calibrated: set[str] = set()  # folder models whose current launch was recorded for calibration
        # Engines accept only this key; it never leaves the service.
        self.internal_key = secrets.token_urlsafe(32)
        self.companions = EmbeddingCompanions(self._engine_supervisor, self.internal_key, bus.publish)
        self._companion_stops: set[asyncio.Task[None]] = set()
        self.remotes: dict[str, RemoteEndpoint] = {}
        self._remote_models: dict[str, tuple[str, str]] = {}  # model id -> (remote name, its id at the remote)

    def add_remote(self, remote: RemoteEndpoint, specs: dict[str, ModelSpec]) -> None:
        """Serve a remote's models (replacing what it listed before)."""
        self.remove_remote(remote.name)
        self.remotes[remote.name] = remote
        for (model_id, spec), upstream in zip(specs.items(), remote.models, strict=True):
            self.models[model_id] = spec
            self._remote_models[model_id] = (remote.name, upstream)

    def remove_remote(self, name: str) -> None:
        self.remotes.pop(name, None)
        for model_id in [m for m, (remote, _) in self._remote_models.items() if remote == name]:
            del self._remote_models[model_id]
            self.models.pop(model_id, None)

    def remote_of(self, model_id: str) -> tuple[RemoteEndpoint, str] | None:
        """The remote serving `model_id` and the model's id there, or None for a model served here."""
        found = self._remote_models.get(model_id)
        return (self.remotes[found[0]], found[1]) if found else None

    def upstream_bearer(self, model_id: str) -> str:
        """The key the gateway sends upstream: a remote's own (possibly none), none to an --upstream server (it runs
        outside ModelDeck, and the internal key must not leave the service), else the engines' internal key."""
        remote = self.remote_of(model_id)
        if remote is not None:
            return remote[0].api_key or ""
        spec = self.models.get(model_id)
        return "" if spec is not None and spec.url is not None else self.internal_key

    def supervisor(self, model_id: str) -> EngineSupervisor | None:
        return self._supervisors.get(model_id)

    def engine_name(self, model_id: str) -> str:
        """The engine that serves the model: the one its last start chose, else the library's."""
        return self._engine_names.get(model_id, self.models[model_id].engine)

    def engine(self, model_id: str) -> Engine:
        return self.engines[self.engine_name(model_id)]

    def _capacity(self, model_id: str) -> int:
        capabilities = self.engine(model_id).capabilities
        folder = self._folders.get(model_id)
        if folder is not None:
            return min(capabilities.max_concurrency, folder.capacity(self._startups.get(model_id)))
        plan = self._plans.get(model_id)
        if capabilities.parallel_from_plan:
            return max(1, min(plan.parallel if plan else 1, capabilities.max_concurrency))
        return capabilities.max_concurrency

    def queue(self, model_id: str) -> EngineQueue:
        queue = self._queues.get(model_id)
        if queue is None:
            queue = self._queues[model_id] = EngineQueue(self._capacity(model_id), self.lifecycle.max_waiting)
        return queue

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        return {model_id: (queue.running, queue.waiting) for model_id, queue in self._queues.items()}

    def context_length(self, model_id: str) -> int | None:
        """The context max_tokens is bounded by; None for a remote, which judges its own requests."""
        if model_id in self._remote_models:
            return None
        plan = self._plans.get(model_id)
        return plan.context_length if plan else DEFAULT_CONTEXT  # the default plan never uses more

    def chat_template(self, model_id: str) -> str | None:
        info = self._infos.get(model_id)
        template = info.metadata.get("tokenizer.chat_template") if info else None
        return template if isinstance(template, str) else None

    def touch(self, model_id: str) -> None:
        """Note that the model was just used (for the idle TTL and least-recently-used eviction)."""
        self._last_used[model_id] = time.monotonic()

    def state(self, model_id: str) -> EngineState:
        return self._state_and_message(model_id)[0]

    def base_url(self, model_id: str) -> str | None:
        """Where the model's server answers, if it is ready."""
        spec = self.models[model_id]
        if spec.url is not None:
            return spec.url
        supervisor = self._supervisors.get(model_id)
        return supervisor.base_url if supervisor and supervisor.state == EngineState.READY else None

    async def embedding_target(self, model_id: str, url: str) -> EmbeddingRoute:
        """Where /v1/embeddings for the model goes, once its engine is ready at `url`: there, unless that engine
        embeds only in a process of its own (app.service.companions), which is then started on demand."""
        engine, spec = self.engine(model_id), self.models[model_id]
        plan, info = self._plans.get(model_id), self._infos.get(model_id)
        if not isinstance(engine, EmbeddingModeEngine) or plan is None or info is None or spec.url is not None:
            return EmbeddingRoute(url)
        if self.state(model_id) != EngineState.READY:  # stopped while the request waited: nothing to start beside
            return EmbeddingRoute(None, f"The model `{model_id}` stopped before its embeddings could be made.")
        footprint = self._footprint(spec, info, companion_plan(plan), engine.name, embedding_process=True)
        return await self.companions.route(model_id, engine, plan, footprint, self._room_next_to)

    async def _room_next_to(self, model_id: str, extra: int) -> str | None:
        need = self._loaded_bytes(model_id) + extra
        return await self._free_memory(model_id, need, f"{model_id} with its embedding process")

    async def engine_refused(self, model_id: str) -> bool:
        """The model's engine refused a connection: True if its process turns out to have exited (its
        supervisor then restarts it, and start() waits for that); False for an external server."""
        supervisor = self._supervisors.get(model_id)
        return supervisor is not None and await supervisor.wait_exited(timeout_s=2.0)

    def _state_and_message(self, model_id: str) -> tuple[EngineState, str]:
        url = self.models[model_id].url
        if url is not None:
            remote = self.remote_of(model_id)
            return EngineState.READY, f"remote {remote[0].name} at {url}" if remote else f"external server at {url}"
        if model_id in self._preflight_errors:
            return EngineState.FAILED, self._preflight_errors[model_id]
        supervisor = self._supervisors.get(model_id)
        return (supervisor.state, supervisor.message) if supervisor else (EngineState.STOPPED, "")

    async def check_start(self, model_id: str, overrides: PlanOverrides | None) -> None:
        """Raise what `start` with these overrides would refuse, before anything starts: UnknownModel,
        BadOverrides (out of the model's bounds) or PlanConflict (running with other parameters)."""
        spec = self.models.get(model_id)
        if spec is None:
            raise UnknownModel(model_id)
        if overrides is None:
            return
        if spec.path is None:
            raise BadOverrides(f"{model_id} is an external server: ModelDeck does not launch it.")
        if spec.path.is_dir():
            if overrides != PlanOverrides():  # an empty set is what the wizard's Launch sends for vLLM
                raise BadOverrides(overrides_refusal(model_id))
            return
        try:
            info = await asyncio.to_thread(read_gguf_info, spec.path)
        except GGUFError:
            return  # the start itself refuses the file, with the reason, as it does without overrides
        overrides.check_context(info.context_length)
        if overrides.engine is not None:
            installation = await asyncio.to_thread(self.engines[overrides.engine].detect)
            if not installation.installed:
                raise BadOverrides(f"{overrides.engine} cannot run here: {installation.detail}", "engine")
        self._check_running_plan(model_id, overrides)

    def _check_running_plan(self, model_id: str, overrides: PlanOverrides) -> None:
        supervisor, plan = self._supervisors.get(model_id), self._plans.get(model_id)
        if supervisor is None or supervisor.state not in ACTIVE_STATES or plan is None:
            return
        info = self._infos.get(model_id)
        other_engine = overrides.engine is not None and overrides.engine != self.engine_name(model_id)
        if other_engine or overrides.apply(plan, info.context_length if info else None) != plan:
            running = ", ".join(f"{name} {value}" for name, value in plan_summary(plan).items())
            running += f" on {self.engine_name(model_id)}"
            raise PlanConflict(f"{model_id} is running with {running}; stop it to launch it with others.")

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
        async with self._start_locks.setdefault(model_id, asyncio.Lock()):
            supervisor = self._supervisors.get(model_id)
            if supervisor is None or supervisor.state not in ACTIVE_STATES:
                if overrides is None:  # a JIT start, `--model`, a plain Launch: the settings saved for the model
                    overrides = await asyncio.to_thread(self.model_settings.get, model_id)
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
        assert spec.path is not None, "only external models have no file, and they have no supervisor"
        prepared = await (self._prepare_folder if spec.path.is_dir() else self._prepare_gguf)(spec, overrides)
        if prepared is None:
            return None
        self._footprints[model_id] = prepared.footprint
        if not await self._make_room(spec):
            return None
        plan = prepared.plan
        self._plans[model_id], self._engine_names[model_id] = plan, prepared.engine_name
        if prepared.info is not None:
            self._infos[model_id] = prepared.info
        if prepared.folder is not None:
            self._folders[model_id] = prepared.folder
        else:
            self._folders.pop(model_id, None)
        self._startups.pop(model_id, None)
        self._calibrated.discard(model_id)
        engine = self.engine(model_id)
        if model_id in self._queues:
            self._queues[model_id].set_capacity(self._capacity(model_id))
        if old is not None:
            await old.stop()  # a failed one: reaps what is left and closes its log
        supervisor = self._engine_supervisor(
            model_id, lambda port: engine.build_command(plan, port, self.internal_key), self._on_engine_event,
            self._on_engine_log, _policy_for(self._policy, engine.capabilities),
        )  # fmt: skip
        self._supervisors[model_id] = supervisor
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

    async def _prepare_gguf(self, spec: ModelSpec, overrides: PlanOverrides | None) -> _Prepared | None:
        model_id = spec.id
        assert spec.path is not None
        try:
            info = await asyncio.to_thread(read_gguf_info, spec.path)
        except GGUFError as exc:
            self._refuse(model_id, str(exc))
            return None
        self._preflight_errors.pop(model_id, None)
        if overrides is not None and overrides.engine:
            engine_name = overrides.engine
        else:
            engine_name = await asyncio.to_thread(self._default_gguf_engine, spec.engine)
        installation = await asyncio.to_thread(self.engines[engine_name].detect)
        if not installation.installed:
            self._refuse(model_id, f"{engine_name} cannot run here: {installation.detail}")
            return None
        plan = default_plan(model_id, info, engine_name)
        if overrides is not None:
            try:
                plan = overrides.apply(plan, info.context_length)
            except BadOverrides as exc:  # checked before the start; the file changed since
                self._refuse(model_id, str(exc))
                return None
            plan = replace(plan, spin_wait=spin_wait_fits(plan.threads))  # the threads asked for may differ
        return _Prepared(plan, engine_name, self._footprint(spec, info, plan, engine_name), info=info)

    def _default_gguf_engine(self, engine_name: str) -> str:
        """llama-server in place of llama-cpp-python where it is installed: its slots serve several clients at once,
        each keeping its prompt cache (blocking: it runs `llama-server --version`)."""
        server = self.engines.get(LLAMA_SERVER)
        if engine_name != LLAMA_CPP_PYTHON or server is None:
            return engine_name
        return LLAMA_SERVER if server.detect().installed else engine_name

    async def _prepare_folder(self, spec: ModelSpec, overrides: PlanOverrides | None) -> _Prepared | None:
        """A safetensors folder for vLLM: planned from its config.json and headers for this machine."""
        if overrides is not None and overrides != PlanOverrides():  # checked before the start
            self._refuse(spec.id, overrides_refusal(spec.id))
            return None
        try:
            hardware = await asyncio.to_thread(self._hardware)
            engine = self.engines[spec.engine]
            folder = await asyncio.to_thread(plan_folder, spec, engine, hardware, self._calibration)
        except FolderRefused as exc:
            self._refuse(spec.id, str(exc))
            return None
        self._preflight_errors.pop(spec.id, None)
        return _Prepared(folder.plan, spec.engine, folder.footprint, folder=folder)

    def _refuse(self, model_id: str, message: str) -> None:
        previous = self.state(model_id)
        self._preflight_errors[model_id] = message
        self._on_engine_event(EngineEvent(model_id, EngineState.FAILED, previous, message))

    def _loaded(self, excluding: str) -> list[str]:
        return [m for m, s in self._supervisors.items() if m != excluding and s.state in ACTIVE_STATES]

    def _is_idle(self, model_id: str) -> bool:
        queue = self._queues.get(model_id)
        return queue is None or (queue.running == 0 and queue.waiting == 0)

    def _footprint(
        self, spec: ModelSpec, info: GGUFInfo, plan: LaunchPlan, engine_name: str, embedding_process: bool = False
    ) -> int:
        """What the plan is predicted to use at its peak (RAM and VRAM), corrected by earlier launches; the file
        size where the model's facts do not allow a prediction."""
        facts = facts_from_gguf(info)
        try:
            predicted = (
                # an embedding process writes a row per input token, as llama.cpp's general model has it
                llama_cpp_memory(facts, plan.context_length, batch=plan.batch_size)
                if embedding_process
                else plan_memory(engine_name, facts, plan)
            )
        except MissingFacts:
            return spec.size_bytes
        corrected = self.memory_check.correction(engine_name, facts.architecture).apply(predicted)
        return corrected.ram + corrected.vram + plan.prompt_cache_bytes

    async def _make_room(self, spec: ModelSpec) -> bool:
        """Stop least recently used idle engines until `spec` fits under the memory cap (predicted peaks)."""
        problem = await self._free_memory(spec.id, self._footprints[spec.id])
        if problem is not None:
            self._refuse(spec.id, problem)
        return problem is None

    async def _free_memory(self, model_id: str, need: int, what: str | None = None) -> str | None:
        """Stop least recently used idle engines other than `model_id`'s until `need` bytes (for `what`, the model
        by default) fit under the memory cap next to the rest; why they cannot, if they cannot."""
        cap = self.lifecycle.max_loaded_bytes
        if cap is None:
            return None
        if need > cap:
            return f"{what or model_id} needs about {need >> 20} MiB, more than the cap of {cap >> 20} MiB"
        while sum(self._loaded_bytes(m) for m in self._loaded(model_id)) + need > cap:
            idle = sorted((m for m in self._loaded(model_id) if self._is_idle(m)), key=self._last_used_at)
            if not idle:
                return f"{what or model_id} does not fit under the memory cap next to engines in use"
            await self._stop_for(idle[0], f"stopped to make room for {model_id}")
        return None

    def _loaded_bytes(self, model_id: str) -> int:
        """The predicted peak memory of the model's engine, and of its embedding companion if one runs."""
        engine = self._footprints.get(model_id, self.models[model_id].size_bytes)
        return engine + self.companions.footprint(model_id)

    def _last_used_at(self, model_id: str) -> float:
        return self._last_used.get(model_id, 0.0)

    async def _stop_for(self, model_id: str, reason: str) -> None:
        supervisor = self._supervisors[model_id]
        await asyncio.gather(supervisor.stop(), self.companions.stop(model_id))
        supervisor.message = reason
        self._on_engine_event(EngineEvent(model_id, EngineState.STOPPED, EngineState.STOPPED, reason))

    async def stop_idle_engines(self) -> None:
        """Stop ready engines unused for longer than their idle TTL, until cancelled."""
        shortest = self.lifecycle.shortest_ttl()
        if shortest is None:
            return
        while True:
            await asyncio.sleep(min(1.0, shortest / 4))
            now = time.monotonic()
            for model_id in self._loaded(excluding=""):
                ttl, idle_for = self.lifecycle.ttl_for(model_id), now - self._last_used_at(model_id)
                idle = self._supervisors[model_id].state == EngineState.READY and self._is_idle(model_id)
                if ttl is not None and idle and idle_for > ttl:
                    await self._stop_for(model_id, f"stopped after {idle_for:.0f} s idle (TTL {ttl:g} s)")

    async def stop(self, model_id: str) -> None:
        if model_id not in self.models:
            raise UnknownModel(model_id)
        self._preflight_errors.pop(model_id, None)
        supervisor = self._supervisors.get(model_id)
        if supervisor is not None:
            await asyncio.gather(supervisor.stop(), self.companions.stop(model_id))

    async def stop_all(self) -> None:
        await asyncio.gather(*(supervisor.stop() for supervisor in self._supervisors.values()),
                             self.companions.stop_all())  # fmt: skip

    def describe(self, model_id: str) -> dict[str, Any]:
        """The model and its engine's state, as the control API and /v1/models report it."""
        spec = self.models.get(model_id)
        if spec is None:
            raise UnknownModel(model_id)
        supervisor = self._supervisors.get(model_id)
        state, message = self._state_and_message(model_id)
        queue = self._queues.get(model_id)
        folder = self._folders.get(model_id)
        return {
            "id": spec.id,
            "name": spec.name,
            "path": str(spec.path) if spec.path else spec.url,
            "size_bytes": spec.size_bytes,
            "source": spec.source,
            "engine": self.engine_name(model_id),
            "state": str(state),
            "message": message,
            "pid": supervisor.pid if supervisor else None,
            "port": supervisor.port if supervisor and supervisor.pid else None,
            "restarts": supervisor.restarts if supervisor else 0,
            "diagnosis": asdict(supervisor.diagnosis) if supervisor and supervisor.diagnosis else None,
            "rss_bytes": _rss(supervisor.pid) if supervisor and supervisor.pid else None,
            "running_requests": queue.running if queue else 0,
            "waiting_requests": queue.waiting if queue else 0,
            "memory": self.memory_check.describe(model_id),
            # What a launch can override; a folder model's vLLM plan takes no overrides: see "vllm".
            "plan": plan_summary(plan) if (plan := self._plans.get(model_id)) and folder is None else None,
            "launch": asdict(supervisor.launch) if supervisor and supervisor.launch else None,  # secrets redacted
            "idle_ttl_s": None if spec.url is not None else self.lifecycle.ttl_for(model_id),
            "startup": {**startup.to_dict(), "summary": startup.summary()}
            if (startup := self._startups.get(model_id))
            else None,
            "vllm": folder.describe(startup) if folder else None,
            "max_concurrent_requests": queue.capacity if queue else None,  # what the gateway lets through at once
            "embedding_companion": self.companions.describe(model_id),
        }

    def logs(self, model_id: str, count: int | None = None) -> list[str]:
        if model_id not in self.models:
            raise UnknownModel(model_id)
        supervisor = self._supervisors.get(model_id)
        return supervisor.log.tail(count) if supervisor else []

    def request_finished(self, model_id: str) -> None:
        self.memory_check.request_finished(model_id)

    def _on_engine_event(self, event: EngineEvent) -> None:
        info, plan = self._infos.get(event.model_id), self._plans.get(event.model_id)
        if event.state == EngineState.READY and event.pid and info and plan:
            engine = self.engine_name(event.model_id)
            self.memory_check.engine_ready(event.model_id, engine, facts_from_gguf(info), plan, event.pid)
        if event.state == EngineState.READY:
            self._record_folder_startup(event.model_id)
        if event.state == EngineState.FAILED and self.companions.describe(event.model_id) is not None:
            stopping = asyncio.create_task(self.companions.stop(event.model_id))  # the model is down: it goes too
            self._companion_stops.add(stopping)
            stopping.add_done_callback(self._companion_stops.discard)
        self._bus.publish({"type": "engine", **asdict(event)})

    def _on_engine_log(self, model_id: str, line: str) -> None:
        if self.models[model_id].engine == "vllm":
            before = self._startups.get(model_id, VLLMStartup())
            after = parse_line(before, line)
            if after is not before:
                self._startups[model_id] = after
                self._bus.publish({"type": "startup", "model_id": model_id, **after.to_dict()})
                if model_id in self._queues and model_id in self._folders:
                    self._queues[model_id].set_capacity(self._capacity(model_id))
                self._record_folder_startup(model_id)
        self._bus.publish({"type": "log", "model_id": model_id, "line": line})

    def _record_folder_startup(self, model_id: str) -> None:
        """Once per launch of a folder model, when it is ready and its log has said its KV cache memory (in either
        order: the log is read while readiness is probed), its start-up goes to calibration."""
        folder, startup, supervisor = (
            self._folders.get(model_id),
            self._startups.get(model_id),
            self.supervisor(model_id),
        )
        if folder is None or startup is None or supervisor is None or supervisor.state != EngineState.READY:
            return
        if model_id not in self._calibrated and record_startup(self._calibration, model_id, folder, startup):
            self._calibrated.add(model_id)


def _policy_for(policy: SupervisorPolicy | None, capabilities: Capabilities) -> SupervisorPolicy:
    """The supervisor's timing, waiting longer for an engine that may start in silence."""
    policy = policy or SupervisorPolicy()
    quiet = capabilities.quiet_start_s
    if quiet is not None and quiet > policy.ready_timeout_s:
        return replace(policy, ready_timeout_s=quiet)
    return policy


__all__ = ["EngineManager", "LifecyclePolicy", "PlanConflict", "RemoteEndpoint", "UnknownModel"]
