"""Embedding companions: for a model whose engine does not embed while it chats (llama-server: its `--help` says
`--embeddings` restricts it to embeddings, for dedicated embedding models), a second process of the same model file
in embedding mode, started on the first /v1/embeddings request, supervised like any engine, and stopped with the
model (EngineManager calls `stop`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from app.api_types import CompanionRecord, ModelState
from app.service.launch.memory_check import tree_rss
from engines.base import EmbeddingLimitEngine, EmbeddingModeEngine, InputLimit, LaunchPlan
from engines.states import ACTIVE_STATES, EngineState, StateChange
from engines.supervisor import CommandFactory, EngineSupervisor, EventSink

# Tokens: one input at a time, embedded in one physical batch, whose compute buffer grows with it; a longer input
# gets llama-server's own error.
EMBEDDING_CONTEXT = 1024
SUFFIX = "+embeddings"  # the companion's name: its log file, its engine record and its events

# Whether `need` bytes more fit under the memory cap next to the model (stopping idle engines to make room):
# None when they do, else why not.
RoomCheck = Callable[[str, int], Awaitable[str | None]]
# The service's supervisor for one engine process: its name, command and event sink.
SupervisorFactory = Callable[[str, CommandFactory, EventSink], EngineSupervisor]


@dataclass(frozen=True)
class EmbeddingRoute:
    """Where an embeddings request for a model goes: `url`, or nowhere, for the reason in `error`."""

    url: str | None
    error: str = ""
    limit: InputLimit | None = None  # the most tokens one input may have there; None: not known here


def own_limit(engine: object, plan: LaunchPlan | None) -> InputLimit | None:
    """The input limit of an engine that embeds in the process it chats in (a companion's is `route`'s)."""
    if plan is None or isinstance(engine, EmbeddingModeEngine) or not isinstance(engine, EmbeddingLimitEngine):
        return None
    return engine.embedding_limit(plan)


def companion_plan(plan: LaunchPlan) -> LaunchPlan:
    """The model's plan, cut down to what embedding one input at a time needs: a small context in one slot."""
    context = min(plan.context_length, EMBEDDING_CONTEXT)
    return replace(plan, context_length=context, batch_size=context, parallel=1, chat_format=None)


class EmbeddingCompanions:
    """One companion supervisor per model at most, with the memory it is predicted to use."""

    def __init__(
        self, new_supervisor: SupervisorFactory, internal_key: str, publish: Callable[[dict[str, Any]], None]
    ) -> None:
        self._new_supervisor = new_supervisor
        self._key = internal_key
        self._publish = publish
        self._supervisors: dict[str, EngineSupervisor] = {}
        self._footprints: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def route(
        self, model_id: str, engine: EmbeddingModeEngine, plan: LaunchPlan, footprint: int, room: RoomCheck
    ) -> EmbeddingRoute:
        """The companion's URL, starting it (and waiting until it is ready) if it is not running."""
        async with self._locks.setdefault(model_id, asyncio.Lock()):
            supervisor = self._supervisors.get(model_id)
            if supervisor is None or supervisor.state not in ACTIVE_STATES:
                problem = await room(model_id, footprint)
                if problem is not None:
                    return EmbeddingRoute(None, f"The embedding process of `{model_id}` cannot start: {problem}.")
                if supervisor is not None:
                    await supervisor.stop()  # a failed one: reaps what is left and closes its log
                supervisor = self._supervisors[model_id] = self._new(model_id, engine, companion_plan(plan))
                self._footprints[model_id] = footprint
        state = await supervisor.start()
        if state != EngineState.READY or supervisor.base_url is None:
            # The reason is the engine's log: kept for the control API, not sent to OpenAI clients.
            return EmbeddingRoute(None, f"The embedding process of `{model_id}` could not start; its engine's log is "
                                 "in the ModelDeck window and the control API.")  # fmt: skip
        limit = engine.embedding_limit(companion_plan(plan)) if isinstance(engine, EmbeddingLimitEngine) else None
        return EmbeddingRoute(supervisor.base_url, limit=limit)

    def _new(self, model_id: str, engine: EmbeddingModeEngine, plan: LaunchPlan) -> EngineSupervisor:
        return self._new_supervisor(
            model_id + SUFFIX, lambda port: engine.embedding_command(plan, port, self._key), self._on_event
        )

    def footprint(self, model_id: str) -> int:
        """The predicted peak memory of the model's companion while it runs; 0 when none does."""
        supervisor = self._supervisors.get(model_id)
        return self._footprints.get(model_id, 0) if supervisor and supervisor.state in ACTIVE_STATES else 0

    async def stop(self, model_id: str) -> None:
        """Stop the model's companion, if it has one. Safe to call twice. It is shown (stopping) until its
        processes have exited."""
        supervisor = self._supervisors.get(model_id)
        if supervisor is None:
            return
        await supervisor.stop()
        if self._supervisors.get(model_id) is supervisor:  # not replaced by route() meanwhile
            del self._supervisors[model_id]
            self._footprints.pop(model_id, None)

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(model_id) for model_id in list(self._supervisors)))

    def describe(self, model_id: str) -> CompanionRecord | None:
        """The companion's state as /api/models shows it under its model; None when it has none."""
        supervisor = self._supervisors.get(model_id)
        if supervisor is None:
            return None
        return {
            "state": ModelState(supervisor.state),
            "message": supervisor.message,
            "pid": supervisor.pid,
            "port": supervisor.port if supervisor.pid else None,
            "restarts": supervisor.restarts,
            "footprint_bytes": self.footprint(model_id),  # predicted peak, as counted under the memory cap
            "rss_bytes": tree_rss(supervisor.pid) if supervisor.pid else None,
        }

    def _on_event(self, event: StateChange) -> None:
        self._publish({"type": "embedding_companion", **asdict(event), "model_id": event.model_id.removesuffix(SUFFIX)})


__all__ = ["EMBEDDING_CONTEXT", "EmbeddingCompanions", "EmbeddingRoute", "companion_plan", "own_limit"]
