"""How a model is launched here: the engine that serves it, its plan and its predicted peak memory, checked before
anything starts. The engine manager (app.service.engines) asks; it keeps the engines' lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

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
from app.planner.draft import DraftChoice, DraftRefused, choose_draft, vocabulary_header, vocabulary_mismatch
from app.planner.facts import facts_from_gguf
from app.planner.memory import MissingFacts, llama_cpp_memory, plan_memory
from app.planner.recommend import gpu_layers_that_fit
from app.service.launch.folder_models import FolderLaunch, FolderRefused, overrides_refusal, plan_folder
from app.service.launch.memory_check import MemoryCheck
from app.service.launch.model_settings import ModelSettingsStore
from app.service.launch.overrides import GGUF_ENGINES, BadOverrides, PlanOverrides, plan_summary
from engines.base import Engine, LaunchPlan, OffloadingEngine
from engines.gguf import GGUFError, GGUFInfo, read_gguf_info


class LaunchRefused(Exception):
    """The model's file, engine or plan cannot start here; the message says why."""


@dataclass(frozen=True)
class PreparedLaunch:
    """A checked start: the plan, its engine and predicted peak memory, with the GGUF header or the vLLM launch."""

    plan: LaunchPlan
    engine_name: str
    footprint: int
    info: GGUFInfo | None = None
    folder: FolderLaunch | None = None
    draft: DraftChoice | None = None  # the model drafting for it, and why it may


class LaunchPlanner:
    """Plans starts from a model's file, its saved load settings, the engines installed and this machine."""

    def __init__(
        self,
        paths: AppPaths,
        engines: Mapping[str, Engine],
        hardware: Callable[[], HardwareProfile],
        models: Mapping[str, ModelSpec] | None = None,
    ) -> None:
        # Every engine by name, installed or not (app.installs.available); each model's spec names its default.
        self.engines = engines
        self._models = models if models is not None else {}  # the service's models, for a `draft` to name
        self.calibration = CalibrationStore(paths.calibration_db)
        self.memory_check = MemoryCheck(self.calibration)
        self.model_settings = ModelSettingsStore(paths.config)  # per-model load settings for starts that name none
        self._hardware = hardware  # this machine's profile (blocking: called on a worker thread)
        # Whether llama-server was installed at the last detection (None: not detected yet), so that the engine a
        # start would choose is named without running `llama-server --version` on the event loop.
        self._server_installed: bool | None = None
        self._detections: set[asyncio.Task[None]] = set()
        # GGUF headers read, by file and whether with the token list's digest, with the file's size and mtime then: a
        # checked start (check_overrides, then prepare) reads a header once, a draft's pairing and the candidates
        # listed on every settings estimate each file's vocabulary once.
        self._headers: dict[tuple[Path, bool], tuple[int, int, GGUFInfo]] = {}

    def engine_before_start(self, spec: ModelSpec) -> str:
        """The engine a start without parameters would choose for a model never started: its saved settings'
        engine, else the default engine for its file, as last detected (detect_engines). Never blocks."""
        if spec.path is None:  # a remote or an --upstream server (a folder model's engine is never replaced below)
            return spec.engine
        saved = self.model_settings.known(spec.id)
        if saved is not None and saved.engine is not None:
            return saved.engine
        return self._default_engine_as_detected(spec.engine)

    def context_before_start(self, spec: ModelSpec | None, engine_name: str) -> int | None:
        """The most a start without parameters (a JIT start: the saved settings, else the defaults) gives one
        request, never less than the engine will allow: the saved context, else a default context per slot (a
        llama-server slot may use the others' share). None for a folder model, whose context its config sets."""
        if spec is None:  # the gateway checks a request before it refuses an unknown model
            return DEFAULT_CONTEXT
        if engine_name not in GGUF_ENGINES:
            return None
        saved = self.model_settings.known(spec.id) or PlanOverrides()
        return saved.context or DEFAULT_CONTEXT * saved.slots(engine_name)

    async def check_overrides(self, spec: ModelSpec, overrides: PlanOverrides) -> None:
        """Raise BadOverrides where `overrides` are out of the model's bounds or name an engine not installed."""
        if spec.path is None:
            raise BadOverrides(f"{spec.id} is an external server: ModelDeck does not launch it.")
        if spec.path.is_dir():
            if overrides != PlanOverrides():  # an empty set is what the wizard's Launch sends for vLLM
                raise BadOverrides(overrides_refusal(spec.id))
            return
        try:
            info = await asyncio.to_thread(self.gguf_header, spec.path)
        except GGUFError:
            return  # the start itself refuses the file, with the reason, as it does without overrides
        engine = overrides.engine
        if engine is None:
            engine = await asyncio.to_thread(self.default_gguf_engine, spec.engine)
        overrides.check_context(info.context_length, overrides.slots(engine))
        overrides.check_speculation(engine)
        if overrides.draft is not None:
            context = overrides.context or DEFAULT_CONTEXT * overrides.slots(engine)
            await asyncio.to_thread(self.draft_for, spec, overrides.draft, context)
        if overrides.engine is not None:
            installation = await asyncio.to_thread(self.engines[overrides.engine].detect)
            if not installation.installed:
                raise BadOverrides(f"{overrides.engine} cannot run here: {installation.detail}", "engine")

    async def prepare(self, spec: ModelSpec, overrides: PlanOverrides | None) -> PreparedLaunch:
        """The checked start of a model from a file (GGUF) or a folder (vLLM); raises LaunchRefused."""
        assert spec.path is not None, "only external models have no file, and they are not launched"
        if spec.path.is_dir():
            return await self._prepare_folder(spec, overrides)
        return await self._prepare_gguf(spec, overrides)

    async def _prepare_gguf(self, spec: ModelSpec, overrides: PlanOverrides | None) -> PreparedLaunch:
        assert spec.path is not None
        try:
            info = await asyncio.to_thread(self.gguf_header, spec.path)
        except GGUFError as exc:
            raise LaunchRefused(str(exc)) from None
        if overrides is not None and overrides.engine:
            engine_name = overrides.engine
        else:
            engine_name = await asyncio.to_thread(self.default_gguf_engine, spec.engine)
        installation = await asyncio.to_thread(self.engines[engine_name].detect)
        if not installation.installed:
            raise LaunchRefused(f"{engine_name} cannot run here: {installation.detail}")
        parallel = overrides.parallel if overrides is not None else None
        busy = await asyncio.to_thread(busy_cores)
        plan = await asyncio.to_thread(self.default_gguf_plan, spec.id, info, engine_name, parallel, busy)
        draft = None
        if overrides is not None:
            try:
                plan = overrides.apply(plan, info.context_length)
                overrides.check_speculation(engine_name)
                if overrides.draft is not None:
                    draft = await asyncio.to_thread(self.draft_for, spec, overrides.draft, plan.context_length)
                    plan = with_draft(plan, draft)
            except BadOverrides as exc:  # checked before the start; the files changed since
                raise LaunchRefused(str(exc)) from None
            plan = replace(plan, spin_wait=spin_wait_fits(plan.threads, busy))  # the threads asked for may differ
        footprint = self.footprint(spec, info, plan, engine_name) + (draft.added_bytes if draft else 0)
        return PreparedLaunch(plan, engine_name, footprint, info=info, draft=draft)

    def draft_for(self, spec: ModelSpec, draft_id: str, context: int) -> DraftChoice:
        """Model `draft_id` as the draft of `spec` at `context` tokens, checked: a GGUF model ModelDeck knows, with
        the same vocabulary (blocking: reads both headers' token lists). Raises BadOverrides naming `draft`."""
        draft_spec = self._models.get(draft_id)
        if draft_spec is None:
            known = ", ".join(sorted(self._models)) or "none"
            raise BadOverrides(f"`draft` names no model ModelDeck knows: {draft_id!r} (known: {known}).", "draft")
        if spec.path is None or draft_spec.path is None or draft_spec.path.is_dir():
            raise BadOverrides(f"{draft_id} is not a GGUF file: only one can draft on llama-server.", "draft")
        try:
            target, draft = self.vocabulary(spec.path), self.vocabulary(draft_spec.path)
            return choose_draft(spec.id, target, draft_id, draft, context)
        except (GGUFError, DraftRefused) as exc:
            raise BadOverrides(str(exc), "draft") from None

    def draft_candidates(self, spec: ModelSpec) -> list[str]:
        """The other GGUF models that could draft for `spec` (the same vocabulary), smallest first (blocking)."""
        if spec.path is None or spec.path.is_dir():
            return []
        try:
            target = self.vocabulary(spec.path)
        except GGUFError:
            return []
        found = []
        for other in sorted(self._models.values(), key=lambda m: m.size_bytes):
            if other.id == spec.id or other.path is None or other.path.is_dir() or other.size_bytes >= spec.size_bytes:
                continue
            try:
                if vocabulary_mismatch(target, self.vocabulary(other.path)) is None:
                    found.append(other.id)
            except GGUFError:
                continue
        return found

    def gguf_header(self, path: Path) -> GGUFInfo:
        """The file's GGUF header, read again only when the file's size or mtime changed since the last read
        (blocking). Raises GGUFError."""
        return self._header(path, tokens=False)

    def vocabulary(self, path: Path) -> GGUFInfo:
        """The file's GGUF header with its token list's digest (app.planner.draft), read as `gguf_header` is."""
        return self._header(path, tokens=True)

    def _header(self, path: Path, tokens: bool) -> GGUFInfo:
        read = vocabulary_header if tokens else read_gguf_info
        try:
            stat = path.stat()
        except OSError:
            return read(path)  # raises GGUFError, saying why
        known = self._headers.get((path, tokens))
        if known is not None and known[:2] == (stat.st_size, stat.st_mtime_ns):
            return known[2]
        info = read(path)
        self._headers[(path, tokens)] = (stat.st_size, stat.st_mtime_ns, info)
        return info

    async def _prepare_folder(self, spec: ModelSpec, overrides: PlanOverrides | None) -> PreparedLaunch:
        """A safetensors folder for vLLM: planned from its config.json and headers for this machine."""
        if overrides is not None and overrides != PlanOverrides():  # checked before the start
            raise LaunchRefused(overrides_refusal(spec.id))
        try:
            hardware = await asyncio.to_thread(self._hardware)
            engine = self.engines[spec.engine]
            folder = await asyncio.to_thread(plan_folder, spec, engine, hardware, self.calibration)
        except FolderRefused as exc:
            raise LaunchRefused(str(exc)) from None
        return PreparedLaunch(folder.plan, spec.engine, folder.footprint, folder=folder)

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
        engine_before_start)."""
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
        anything asks for a model's engine, and after an engine was built or installed."""

        def detect() -> None:
            self.default_gguf_engine(LLAMA_CPP_PYTHON)
            self.model_settings.get("")  # loads the file, which known() then reads without blocking

        await asyncio.to_thread(detect)

    def engines_changed(self) -> None:
        """An engine was just built or installed: detect again, in the background (on the event loop)."""
        detecting = asyncio.create_task(self.detect_engines())
        self._detections.add(detecting)
        detecting.add_done_callback(self._detections.discard)

    def footprint(
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


def with_draft(plan: LaunchPlan, draft: DraftChoice) -> LaunchPlan:
    """`plan` with `draft` drafting for it, its layers on the GPU where the model's are."""
    layers = draft.layers if plan.gpu_layers > 0 else 0
    return replace(plan, draft_path=draft.path, draft_model=draft.model_id, draft_gpu_layers=layers)


def running_plan_conflict(
    model_id: str, plan: LaunchPlan, info: GGUFInfo | None, engine_name: str, overrides: PlanOverrides
) -> str | None:
    """Why `overrides` cannot apply to the model running with `plan` on `engine_name` (it must stop first); None
    when they change nothing."""
    other_engine = overrides.engine is not None and overrides.engine != engine_name
    other_draft = overrides.draft is not None and overrides.draft != plan.draft_model
    if not (other_engine or other_draft) and overrides.apply(plan, info.context_length if info else None) == plan:
        return None
    shown = {name: value for name, value in plan_summary(plan).items() if value or name not in ("draft", "lookup")}
    running = ", ".join(f"{name} {value}" for name, value in shown.items())
    return f"{model_id} is running with {running} on {engine_name}; stop it to launch it with others."
