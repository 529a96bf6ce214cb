"""Prompt token counts for engines that leave usage out of streams: the prompt as the engine builds it
(chat template rendered in a sandbox, in a worker process: app.service.gateway.templates), counted by the engine's own
tokenizer."""

from __future__ import annotations

import json
import logging
from typing import Any

from app.service.gateway.templates import TemplateRenderer
from app.service.gateway.upstream import UpstreamPool
from app.service.gateway.upstream_endpoint import Endpoint, UpstreamError

log = logging.getLogger("modeldeck.gateway")


async def count_tokens(pool: UpstreamPool, endpoint: Endpoint, text: str, listed: bool = False) -> int | None:
    """Ask the engine how many tokens `text` is; None when it cannot say. `listed`: the engine's route lists the
    tokens (llama.cpp's /tokenize, which then adds the specials its prompts get) instead of counting them."""
    request = {"content": text, "add_special": True} if listed else {"input": text}
    try:
        reply = await pool.post(endpoint, json.dumps(request).encode())
    except UpstreamError:
        return None
    try:
        answer = await reply.read()
    except UpstreamError:
        return None
    finally:
        reply.release()
    try:
        count = json.loads(answer).get("tokens" if listed else "count") if reply.status == 200 else None
    except (ValueError, AttributeError):
        return None
    if listed and isinstance(count, list):
        count = len(count)
    return count if isinstance(count, int) else None


async def prompt_text(route: str, body: dict[str, Any], template: str | None, renderer: TemplateRenderer) -> str | None:
    """The prompt as text, or None when it cannot be built here (the template fails: said in the log)."""
    if route == "/v1/completions":
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:  # OpenAI's list of prompts: one here (validation)
            prompt = prompt[0]
        return prompt if isinstance(prompt, str) else None
    if template is None:
        return None
    rendered = await renderer.render(template, body["messages"])
    if rendered.text is None:
        log.warning("prompt tokens not counted: the model's chat template failed: %s", rendered.problem)
    return rendered.text
