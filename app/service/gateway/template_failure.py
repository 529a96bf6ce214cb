"""Why a chat request failed in the engine, when its chat template is the cause: rendered again in ModelDeck's own
sandbox (app.service.gateway.templates), off the event loop, and told to the client in place of the engine's error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.service.gateway.features import template_messages
from app.service.gateway.templates import TemplateRenderer

_ADVICE = " Send a prompt to /v1/completions instead, or use a model file with another chat template."


@dataclass(frozen=True)
class TemplateFailure:
    """The answer to give: a 400 when the template refused the conversation, a 500 when it cannot be used."""

    status: int
    kind: str  # OpenAI's error type
    problem: str  # what failed, for the request log

    @property
    def message(self) -> str:
        """What the client is told: the problem, and for an unusable template what to do instead."""
        return self.problem + _ADVICE if self.status == 500 else self.problem


async def template_failure(renderer: TemplateRenderer, template: str, messages: Any) -> TemplateFailure | None:
    """The template's failure on `messages` (as the engine gave them to it); None when it renders them."""
    rendered = await renderer.render(template, template_messages(messages))
    if rendered.text is not None:
        return None
    if rendered.kind == "refused":  # the template's own check of the conversation (roles, order, ...)
        status, kind, what = 400, "invalid_request_error", "The model's chat template refused these messages"
    else:
        status, kind, what = 500, "server_error", "The model's chat template cannot be used"
    return TemplateFailure(status, kind, f"{what}: {rendered.problem}.")
