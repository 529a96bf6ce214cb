"""The dialects the endpoint speaks besides OpenAI's, each a translation over the gateway's OpenAI core."""

from __future__ import annotations

from app.service.dialects.anthropic import AnthropicDialect
from app.service.dialects.inner import AsgiApp
from app.service.dialects.ollama import OllamaDialect
from app.service.engines import EngineManager
from app.service.gateway.dialect import Dialect
from app.service.gateway.prompt_count import PromptCounter


def endpoint_dialects(
    core: AsgiApp, manager: EngineManager, max_body_bytes: int, counter: PromptCounter
) -> list[Dialect]:
    """Every dialect, translating to `core` (Gateway.openai); `max_body_bytes` bounds their request bodies, `counter`
    (Gateway.prompt_counter) counts prompts' tokens for those that have a route for it."""
    return [
        AnthropicDialect(core, counter, max_body_bytes),
        OllamaDialect(core, manager, max_body_bytes),
    ]
