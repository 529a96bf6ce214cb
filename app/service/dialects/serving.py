"""The dialects the endpoint speaks besides OpenAI's, each a translation over the gateway's OpenAI core."""

from __future__ import annotations

from app.service.dialects.inner import AsgiApp
from app.service.dialects.ollama import OllamaDialect
from app.service.engines import EngineManager
from app.service.gateway.dialect import Dialect


def endpoint_dialects(core: AsgiApp, manager: EngineManager, max_body_bytes: int) -> list[Dialect]:
    """Every dialect, translating to `core` (Gateway.openai); `max_body_bytes` bounds their request bodies."""
    return [OllamaDialect(core, manager, max_body_bytes)]
