"""The dialects the endpoint speaks besides OpenAI's, each a translation over the gateway's OpenAI core."""

from __future__ import annotations

from app.service.dialects.inner import AsgiApp
from app.service.dialects.response_store import ResponseStore
from app.service.dialects.responses import ResponsesDialect
from app.service.engines import EngineManager
from app.service.gateway.dialect import Dialect


def endpoint_dialects(
    core: AsgiApp, manager: EngineManager, max_body_bytes: int, responses: ResponseStore | None = None
) -> list[Dialect]:
    """Every dialect, translating to `core` (Gateway.openai); `max_body_bytes` bounds their request bodies;
    `responses` keeps the Responses API's stored responses (None: none kept)."""
    return [ResponsesDialect(core, responses, max_body_bytes)]
