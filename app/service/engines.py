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
from app.planner.defaults import (
    DEFAULT_CONTEXT,
    LLAMA_CPP_PYTHON,
    LLAMA_SERVER,
    busy_cores,
    default_plan,
    spin_wait_fits,
)
from app.planner.facts import facts_from_gguf
from app.planner.memory import MissingFacts, llama_cpp_memory, plan_memory
from app.planner.recommend import gpu_layers_that_fit
from app.service.events import EventBus
from app.service.launch.admission import EngineQueue
from app.service.launch.companions import EmbeddingCompanions, EmbeddingRoute, companion_plan, own_limit
from app.service.launch.folder_models import FolderLaunch, FolderRefused, overrides_refusal, plan_folder, record_startup
from app.service.launch.memory_check import MemoryCheck
from app.service.launch.model_settings import ModelSettingsStore
from app.service.launch.overrides import GGUF_ENGINES, BadOverrides, PlanOverrides, plan_summary
from app.service.launch.route import Route
from app.service.remotes import RemoteEndpoint, RemoteModel, RemoteTable
from engines.base import Capabilities, EmbeddingModeEngine, Engine, LaunchPlan, OffloadingEngine, StartupLogEngine
from engines.gguf import GGUFError, GGUFInfo, read_gguf_info
from engines.registry import ENGINES
from engines.states import ACTIVE_STATES, EngineEvent, EngineState
from engines.supervisor import CommandFactory, EngineSupervisor, EventSink, LogSink, SupervisorPolicy
from engines.vllm_log import VLLMStartup

IDLE_CHECK_MIN_S = 0.1  # the idle check's shortest pause, however short a TTL: never a loop that does not wait


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
    max_loaded_source: str = "--max-memory"  # where max_loaded_bytes comes from (app.service.launch.memory_budget)

    def ttl_for(self, model_id: str) -> float | None:
        """The idle TTL of one model: its own if it has one, else the default."""
        return _positive_or_none(self.model_ttl_s.get(model_id, self.idle_ttl_s))

    def shortest_ttl(self) -> float | None:
        ttls = [_positive_or_none(ttl) for ttl in (self.idle_ttl_s, *self.model_ttl_s.values())]
        return min((ttl for ttl in ttls if ttl is not None), default=None)


def _positive_or_none(ttl: float | None) -> float | None:
    """A TTL of 0 or less (or NaN) keeps the engine loaded, as None does: 0 is "never" in the window's settings."""
    return ttl if ttl is not None and ttl > 0 else None


@dataclass(frozen=True)
class _Prepared:
    """A checked start: the plan, its engine and predicted peak memory, with the GGUF header or the vLLM launch."""

    plan: LaunchPlan
    engine_name: str
    footprint: int
    info: GGUFInfo | None = None
    folder: FolderLaunch | None = None


@dataclass
class ModelRecord:
    """What the manager knows of one model it serves from here: its supervisor, its current plan and what was
    checked for it, its queue and when it was last used. Created on first use; remote models have none."""

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
        # Every engine by name, installed or not (app.installs.available); each model's spec names its default.
        self.engines: Mapping[str, Engine] = engines if engines is not None else ENGINES
        self._records: dict[str, ModelRecord] = {}
        self._calibration = CalibrationStore(paths.calibration_db)
        self.memory_check = MemoryCheck(self._calibration)
        self.model_settings = ModelSettingsStore(paths.config)  # per-model load settings for starts that name none
        # This machine's profile for planning folder models (blocking: called on a worker thread).
        self._hardware = hardware or (lambda: detect_hardware(paths.models_dir))
        # Engines accept only this key; it never leaves the service.
        self.internal_key = secrets.token_urlsafe(32)
        self.companions = EmbeddingCompanions(self._engine_supervisor, self.internal_key, bus.publish)
        self._companion_stops: set[asyncio.Task[None]] = set()
        self.remotes = RemoteTable()
        # Whether llama-server was installed at the last detection (None: not detected yet), so that engine_name()
        # names the engine a start would choose without running `llama-server --version` on the event loop.
        self._server_installed: bool | None = None
        self._detections: set[asyncio.Task[None]] = set()

    def _record(self, model_id: str) -> ModelRecord:
        record = self._records.get(model_id)
        if record is None:
            record = self._records[model_id] = ModelRecord()
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
        without parameters would choose (its saved settings' engine, else the default engine for its file), as last
        detected (detect_engines), so that a JIT start's first request is checked and adapted for the engine that
        will serve it. Never blocks."""
        record = self._records.get(model_id)
        if record is not None and record.engine_name is not None:
            return record.engine_name
        spec = self.models[model_id]
        if spec.path is None:  # a remote or an --upstream server (a folder model's engine is never replaced below)
            return spec.engine
        saved = self.model_settings.known(model_id)
        if saved is not None and saved.engine is not None:
            return saved.engine
        return self._default_engine_as_detected(spec.engine)

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
            return self._context_before_start(model_id)
        trained = info.context_length if info is not None else None
        # llama-server lets one slot use the whole shared context, up to the trained context.
        return min(plan.context_length, trained) if trained else plan.context_length

    def _context_before_start(self, model_id: str) -> int | None:
        """The most a start without parameters (a JIT start: the saved settings, else the defaults) gives one
        request, never less than the engine will allow: the saved context, else a default context per slot (a
        llama-server slot may use the others' share). None for a folder model, whose context its config sets."""
        if model_id not in self.models:  # the gateway checks a request before it refuses an unknown model
            return DEFAULT_CONTEXT
        engine = self.engine_name(model_id)
        if engine not in GGUF_ENGINES:
            return None
        saved = self.model_settings.known(model_id) or PlanOverrides()
        return saved.context or DEFAULT_CONTEXT * saved.slots(engine)

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
        footprint = self._footprint(spec, info, companion_plan(plan), engine.name, embedding_process=True)
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
        engine = overrides.engine
        if engine is None:
            engine = await asyncio.to_thread(self.default_gguf_engine, spec.engine)
        overrides.check_context(info.context_length, overrides.slots(engine))
        if overrides.engine is not None:
            installation = await asyncio.to_thread(self.engines[overrides.engine].detect)
            if not installation.installed:
                raise BadOverrides(f"{overrides.engine} cannot run here: {installation.detail}", "engine")
        self._check_running_plan(model_id, overrides)

    def _check_running_plan(self, model_id: str, overrides: PlanOverrides) -> None:
        record = self._record(model_id)
        plan, info = record.plan, record.info
        if not record.active or plan is None:
            return
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
        record = self._record(model_id)
        async with record.start_lock:
            supervisor = record.supervisor
            if supervisor is None or not record.active:
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
        record = self._record(model_id)
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
            self._on_engine_log, _policy_for(self._policy, engine.capabilities),
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

    async def _prepare_gguf(self, spec: ModelSpec, overrides: PlanOverrides | None) -> _Prepared | None:
        model_id = spec.id
        assert spec.path is not None
        try:
            info = await asyncio.to_thread(read_gguf_info, spec.path)
        except GGUFError as exc:
            self._refuse(model_id, str(exc))
            return None
        self._record(model_id).preflight_error = None
        if overrides is not None and overrides.engine:
            engine_name = overrides.engine
        else:
            engine_name = await asyncio.to_thread(self.default_gguf_engine, spec.engine)
        installation = await asyncio.to_thread(self.engines[engine_name].detect)
        if not installation.installed:
            self._refuse(model_id, f"{engine_name} cannot run here: {installation.detail}")
            return None
        parallel = overrides.parallel if overrides is not None else None
        busy = await asyncio.to_thread(busy_cores)
        plan = await asyncio.to_thread(self.default_gguf_plan, model_id, info, engine_name, parallel, busy)
        if overrides is not None:
            try:
                plan = overrides.apply(plan, info.context_length)
            except BadOverrides as exc:  # checked before the start; the file changed since
                self._refuse(model_id, str(exc))
                return None
            plan = replace(plan, spin_wait=spin_wait_fits(plan.threads, busy))  # the threads asked for may differ
        return _Prepared(plan, engine_name, self._footprint(spec, info, plan, engine_name), info=info)

    def default_gguf_plan(
        self, model_id: str, info: GGUFInfo, engine_name: str, parallel: int | None = None, busy: float | None = None
    ) -> LaunchPlan:
        """The plan of a start that names no parameters (or only `parallel`, llama-server's slots): the CPU
        defaults, with as many layers on this machine's GPU as fit at its context (llama-server's: one default
        context per slot) where the engine's build has a GPU backend (blocking: it asks the engine and the
        hardware, and samples the machine's CPU use unless `busy` says it, as for spin_wait_fits)."""
        plan = default_plan(model_id, info, engine_name, busy, parallel)
        engine = self.engines[engine_name]
        if not isinstance(engine, OffloadingEngine) or not engine.gpu_offload():
            return plan
        hardware = self._hardware()
        server = engine_name == LLAMA_SERVER
        layers = gpu_layers_that_fit(hardware, facts_from_gguf(info), plan.context_length, plan.parallel, server)
        return replace(plan, gpu_layers=layers)

    def default_gguf_engine(self, engine_name: str) -> str:
        """llama-server in place of llama-cpp-python where it is installed: its slots serve several clients at once,
        each keeping its prompt cache (blocking: it runs `llama-server --version`; the answer is kept for
        engine_name)."""
        server = self.engines.get(LLAMA_SERVER)
        if engine_name != LLAMA_CPP_PYTHON or server is None:
            return engine_name
        self._server_installed = server.detect().installed
        return self._default_engine_as_detected(engine_name)

    def _default_engine_as_detected(self, engine_name: str) -> str:
        """default_gguf_engine's answer from the last detection; the library's engine before any."""
        if engine_name == LLAMA_CPP_PYTHON and LLAMA_SERVER in self.engines and self._server_installed:
            return LLAMA_SERVER
        return engine_name

    async def detect_engines(self) -> None:
        """Detect the default engine and read the saved load settings, off the event loop: at start-up, before
        anything asks engine_name(), and after an engine was built or installed."""

        def detect() -> None:
            self.default_gguf_engine(LLAMA_CPP_PYTHON)
            self.model_settings.get("")  # loads the file, which known() then reads without blocking

        await asyncio.to_thread(detect)

    def engines_changed(self) -> None:
        """An engine was just built or installed: detect again, in the background (on the event loop)."""
        detecting = asyncio.create_task(self.detect_engines())
        self._detections.add(detecting)
        detecting.add_done_callback(self._detections.discard)

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
        self._record(spec.id).preflight_error = None
        return _Prepared(folder.plan, spec.engine, folder.footprint, folder=folder)

    def _refuse(self, model_id: str, message: str) -> None:
        previous = self.state(model_id)
        self._record(model_id).preflight_error = message
        self._on_engine_event(EngineEvent(model_id, EngineState.FAILED, previous, message))

    def _loaded(self, excluding: str) -> list[str]:
        return [m for m, record in self._records.items() if m != excluding and record.active]

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
        problem = await self._free_memory(spec.id, self._record(spec.id).footprint or spec.size_bytes)
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
            idle = sorted((m for m in self._loaded(model_id) if self._records[m].idle), key=self._last_used_at)
            if not idle:
                return f"{what or model_id} does not fit under the memory cap next to engines in use"
            await self._stop_for(idle[0], f"stopped to make room for {model_id}")
        return None

    def _loaded_bytes(self, model_id: str) -> int:
        """The predicted peak memory of the model's engine, and of its embedding companion if one runs."""
        record = self._records.get(model_id)
        engine = record.footprint if record and record.footprint is not None else self.models[model_id].size_bytes
        return engine + self.companions.footprint(model_id)

    def _last_used_at(self, model_id: str) -> float:
        record = self._records.get(model_id)
        return record.last_used if record else 0.0

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
                ttl, idle_for = self.lifecycle.ttl_for(model_id), now - self._last_used_at(model_id)
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

    def describe(self, model_id: str) -> dict[str, Any]:
        """The model and its engine's state, as the control API and /v1/models report it."""
        spec = self.models.get(model_id)
        if spec is None:
            raise UnknownModel(model_id)
        record = self._records.get(model_id) or ModelRecord()
        supervisor, queue, folder, startup = record.supervisor, record.queue, record.folder, record.startup
        state, message = self._state_and_message(model_id)
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
            "plan": plan_summary(record.plan) if record.plan and folder is None else None,
            "launch": asdict(supervisor.launch) if supervisor and supervisor.launch else None,  # secrets redacted
            "idle_ttl_s": None if spec.url is not None else self.lifecycle.ttl_for(model_id),
            "startup": {**startup.to_dict(), "summary": startup.summary()} if startup else None,
            "vllm": folder.describe(startup) if folder else None,
            "max_concurrent_requests": queue.capacity if queue else None,  # what the gateway lets through at once
            "embedding_companion": self.companions.describe(model_id),
        }

    def logs(self, model_id: str, count: int | None = None) -> list[str]:
        if model_id not in self.models:
            raise UnknownModel(model_id)
        supervisor = self.supervisor(model_id)
        return supervisor.log.tail(count) if supervisor else []

    def request_finished(self, model_id: str) -> None:
        """A request for the model was answered (or given up): it was used until now."""
        self.touch(model_id)
        self.memory_check.request_finished(model_id)

    def _on_engine_event(self, event: EngineEvent) -> None:
        record = self._records.get(event.model_id)
        info, plan = (record.info, record.plan) if record else (None, None)
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
                self._record_folder_startup(model_id)
        self._bus.publish({"type": "log", "model_id": model_id, "line": line})

    def _record_folder_startup(self, model_id: str) -> None:
        """Once per launch of a folder model, when it is ready and its log has said its KV cache memory (in either
        order: the log is read while readiness is probed), its start-up goes to calibration."""
        record = self._record(model_id)
        folder, startup, supervisor = record.folder, record.startup, record.supervisor
        if folder is None or startup is None or supervisor is None or supervisor.state != EngineState.READY:
            return
        if not record.calibrated and record_startup(self._calibration, model_id, folder, startup):
            record.calibrated = True


def _policy_for(policy: SupervisorPolicy | None, capabilities: Capabilities) -> SupervisorPolicy:
    """The supervisor's timing, waiting longer for an engine that may start in silence."""
    policy = policy or SupervisorPolicy()
    quiet = capabilities.quiet_start_s
    if quiet is not None and quiet > policy.ready_timeout_s:
        return replace(policy, ready_timeout_s=quiet)
    return policy


__all__ = ["EngineManager", "LifecyclePolicy", "ModelRecord", "PlanConflict", "UnknownModel"]
