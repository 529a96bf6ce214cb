"""A chat prompt's tokens counted without generating, for the dialects that have a route for it (Anthropic's
`count_tokens`): checked as the core checks a chat request, the model's engine started as a request would start
it, then the prompt counted as the gateway counts it for usage and limits (app.service.gateway.prompt_limits).

Counting is not a generation: it takes no place in the engine's queue, and is not in the request log."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from app.service.engines import EngineManager
from app.service.gateway.features import CHAT, adapt, template_messages
from app.service.gateway.openai_fields import check_request
from app.service.gateway.prompt_limits import PromptLimits
from app.service.gateway.validation import InvalidRequest
from engines.states import EngineState


@dataclass(frozen=True)
class Counted:
    """The prompt's tokens, or the status and sentence of why they are not known (`kind`: OpenAI's error type)."""

    tokens: int | None
    status: int = 200
    message: str = ""
    kind: str = ""


class PromptCounter:
    """Counts chat prompts with the tokenizer of the model's own engine."""

    def __init__(self, manager: EngineManager, limits: PromptLimits, start_timeout_s: float) -> None:
        self._manager = manager
        self._limits = limits
        self._start_timeout_s = start_timeout_s

    async def count_chat(self, payload: dict[str, Any]) -> Counted:
        """The tokens of the prompt of an OpenAI chat request (`payload`, changed in place) once the model's chat
        template has made it."""
        try:
            model = check_request(CHAT, payload, self._manager.context_length).model
        except InvalidRequest as exc:
            return Counted(None, 400, str(exc), "invalid_request_error")
        if model not in self._manager.models:
            return Counted(None, 404, f"The model `{model}` does not exist.", "not_found_error")
        try:
            state = await asyncio.wait_for(self._manager.start(model), self._start_timeout_s)
        except TimeoutError:
            state = EngineState.STARTING
        try:
            route = self._manager.route(model)
            if state != EngineState.READY or route.url is None:
                message = f"The model `{model}` is not ready ({state.value}): its engine did not start."
                return Counted(None, 503, message, "server_error")
            try:
                adapt(route.engine_name, route.capabilities, CHAT, payload)  # images refused for text-only models
            except InvalidRequest as exc:
                return Counted(None, 400, str(exc), "invalid_request_error")
            plain = {**payload, "messages": template_messages(payload["messages"])}
            tokens = await self._limits.prompt_tokens(CHAT, plain, route)
        finally:
            self._manager.request_finished(model)
        if tokens is None:
            message = f"The tokens of `{model}` cannot be counted here: {route.engine_name} has no tokenizer route, or "
            message += "the model's chat template could not be rendered."
            return Counted(None, 501, message, "server_error")
        return Counted(tokens)
