"""The dialects the endpoint speaks besides OpenAI's, each a translation over the gateway's OpenAI core."""

from __future__ import annotations

from app.service.dialects.anthropic import AnthropicDialect
from app.service.dialects.ollama import OllamaDialect
from app.service.dialects.response_store import ResponseStore
from app.service.dialects.responses import ResponsesDialect
from app.service.engines import EngineManager
from app.service.gateway.gateway import Gateway


def serve_dialects(gateway: Gateway, manager: EngineManager, max_body_bytes: int, responses: ResponseStore) -> None:
    """Every dialect on the gateway's listener, translating to its OpenAI core (Gateway.openai); `max_body_bytes`
    bounds their request bodies; `responses` keeps the Responses API's stored responses."""
    core = gateway.openai
    gateway.serve_dialects([
        AnthropicDialect(core, gateway.prompt_counter, max_body_bytes),
        OllamaDialect(core, manager, max_body_bytes),
        ResponsesDialect(core, responses, max_body_bytes),
    ])  # fmt: skip
