"""Control-API routes for per-model load settings (app.service.launch.model_settings).

GET  /api/models/ID/settings           what is saved, the plan it makes and the memory that plan needs
PUT  /api/models/ID/settings           save a set (an empty object forgets it); 400 naming a bad field
POST /api/models/ID/settings/estimate  the same answer for a set that is not saved (the Load dialog's edits)

Values are checked with the bounds of a start's overrides (app.service.launch.overrides) and against the model (its
trained context, an engine that is installed here), so a saved set never makes a later start fail for a reason
that was known when it was saved. A refused PUT leaves the saved set as it was.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psutil

from app.planner.defaults import logical_cores
from app.planner.facts import facts_from_gguf
from app.planner.memory import MissingFacts, plan_memory
from app.service.control.advisor import Advisor
from app.service.engines import EngineManager, UnknownModel
from app.service.http.api import MAX_SMALL_BODY, read_limited
from app.service.http.asgi import ClientGone, Receive, Send, send_error, send_json
from app.service.http.routes import RoutePattern
from app.service.launch.folder_models import overrides_refusal
from app.service.launch.model_settings import ModelSettingsStore, settings_dict
from app.service.launch.overrides import (
    BATCH_RANGE,
    GGUF_ENGINES,
    GPU_LAYERS_RANGE,
    LOOKUP_RANGE,
    MIN_CONTEXT,
    PARALLEL_RANGE,
    BadOverrides,
    PlanOverrides,
    plan_summary,
)
from app.service.launch.planning import with_draft
from engines.gguf import GGUFError


class _NotPlannable(Exception):
    """The model takes no load settings (an external server, a vLLM folder) or its file cannot be read."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class ModelSettingsRoutes:
    """Answers /api/models/ID/settings[/estimate]; `handle` returns False for other routes."""

    routes: tuple[RoutePattern, ...] = (
        ("GET", "/api/models/{}/settings"), ("PUT", "/api/models/{}/settings"),
        ("POST", "/api/models/{}/settings/estimate"),
    )  # fmt: skip

    def __init__(self, manager: EngineManager, advisor: Advisor) -> None:
        self._manager = manager
        self._store: ModelSettingsStore = manager.planner.model_settings
        self._advisor = advisor
        self._lock = asyncio.Lock()  # one check-and-save at a time

    async def handle(self, method: str, parts: list[str], receive: Receive, send: Send) -> bool:
        match method, parts:
            case "GET", ["api", "models", model_id, "settings"]:
                self._known(model_id)
                await self._answer(send, model_id, await asyncio.to_thread(self._store.get, model_id), saved=True)
            case "PUT", ["api", "models", model_id, "settings"]:
                await self._put(model_id, receive, send)
            case "POST", ["api", "models", model_id, "settings", "estimate"]:
                self._known(model_id)
                read, overrides = await self._read(receive, send)
                if read:
                    await self._answer(send, model_id, overrides, saved=False)
            case _:
                return False
        return True

    def _known(self, model_id: str) -> None:
        if model_id not in self._manager.models:
            raise UnknownModel(model_id)

    async def _read(self, receive: Receive, send: Send) -> tuple[bool, PlanOverrides | None]:
        """Whether the body could be read (a refusal has been sent when not), and its settings: None for an empty
        body or object."""
        try:
            overrides = PlanOverrides.from_json(await read_limited(receive, MAX_SMALL_BODY))
        except ClientGone:
            return False, None
        except BadOverrides as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", param=exc.param)
            return False, None
        return True, None if overrides == PlanOverrides() else overrides

    async def _put(self, model_id: str, receive: Receive, send: Send) -> None:
        self._known(model_id)
        read, overrides = await self._read(receive, send)
        if not read:
            return
        async with self._lock:
            if not await self._answer(send, model_id, overrides, saved=False, dry=True):
                return  # refused: the saved set stays as it was
            await asyncio.to_thread(self._store.put, model_id, overrides)
        await self._answer(send, model_id, overrides, saved=True)

    async def _answer(
        self, send: Send, model_id: str, overrides: PlanOverrides | None, saved: bool, dry: bool = False
    ) -> bool:
        """Send the settings with their plan and memory (or, `dry`, only a refusal); False when refused."""
        try:
            answer = await asyncio.to_thread(self._describe, model_id, overrides)
        except BadOverrides as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", param=exc.param)
            return False
        except _NotPlannable as exc:
            await send_error(send, exc.status, str(exc), "invalid_request_error", exc.code)
            return False
        if not dry:
            hardware = await self._advisor.hardware()
            known = [gpu.memory_free for gpu in hardware.gpus if gpu.memory_free is not None]
            # Unknown is None: no GPU, or one whose free memory was not read.
            gpu_free = sum(known) if hardware.gpus and len(known) == len(hardware.gpus) else None
            answer["free"] = {"ram_bytes": psutil.virtual_memory().available, "gpu_bytes": gpu_free}
            answer["saved"] = saved and overrides is not None
            await send_json(send, 200, answer)
        return True

    def _describe(self, model_id: str, overrides: PlanOverrides | None) -> dict[str, Any]:
        """Blocking (reads the GGUF header, asks engines their version): the plan these settings make."""
        spec = self._manager.models[model_id]
        if spec.path is None:
            raise _NotPlannable(400, f"{model_id} is an external server: ModelDeck does not launch it.", "external")
        if spec.path.is_dir():
            if overrides is not None:
                raise BadOverrides(overrides_refusal(model_id))
            raise _NotPlannable(400, overrides_refusal(model_id), "folder_model")
        try:
            info = self._manager.planner.gguf_header(spec.path)
        except GGUFError as exc:
            raise _NotPlannable(422, str(exc), "model_unreadable") from None
        except OSError as exc:  # gone or unreadable since it was listed
            raise _NotPlannable(422, f"Cannot read {spec.path}: {exc.strerror or exc}", "model_unreadable") from None
        wanted = overrides or PlanOverrides()
        trained = info.context_length
        engine_name = wanted.engine or self._manager.planner.default_gguf_engine(spec.engine)
        wanted.check_context(trained, wanted.slots(engine_name))
        installation = self._manager.engines[engine_name].detect()
        if wanted.engine is not None and not installation.installed:
            raise BadOverrides(f"{engine_name} cannot run here: {installation.detail}", "engine")
        # The wait policy is chosen when the engine starts and not shown here: no need to sample the machine.
        default = self._manager.planner.default_gguf_plan(model_id, info, engine_name, wanted.parallel, busy=0.0)
        plan = wanted.apply(default, trained)
        wanted.check_speculation(engine_name)
        planner = self._manager.planner
        draft = planner.draft_for(spec, wanted.draft, plan.context_length) if wanted.draft is not None else None
        if draft is not None:
            plan = with_draft(plan, draft)
        facts = facts_from_gguf(info)
        try:
            predicted = plan_memory(engine_name, facts, plan)
            corrected = planner.memory_check.correction(engine_name, facts.architecture).apply(predicted)
            extra = plan.prompt_cache_bytes + (draft.added_bytes if draft else 0)  # the draft's, as the planner counts
            memory: dict[str, int] | None = {
                "ram_bytes": corrected.ram + extra,
                "vram_bytes": corrected.vram,
                "total_bytes": corrected.ram + corrected.vram + extra,
            }
        except MissingFacts:
            memory = None
        installed = [name for name in GGUF_ENGINES if self._manager.engines[name].detect().installed]
        return {
            "model_id": model_id,
            "settings": settings_dict(overrides),
            "plan": {**plan_summary(plan), "engine": engine_name},
            "memory": memory,
            "draft_reason": draft.reason if draft else None,
            "drafts": planner.draft_candidates(spec),  # the models that could draft for it, smallest first
            "bounds": {
                # llama-server's slots share the context, each using at most the trained context
                "context": [MIN_CONTEXT, trained * plan.parallel if trained else None],
                "gpu_layers": list(GPU_LAYERS_RANGE),
                "threads": [1, logical_cores()],
                "batch": list(BATCH_RANGE),
                "parallel": list(PARALLEL_RANGE),
                "lookup": list(LOOKUP_RANGE),
                "engine": installed,
            },
        }


__all__ = ["ModelSettingsRoutes"]
