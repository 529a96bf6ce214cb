"""Prompt token counts for engines that leave usage out of streams: the prompt as the engine builds it
(chat template rendered in a sandbox), counted by the engine's own tokenizer."""

from __future__ import annotations

import functools
import json
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.service.upstream import Endpoint, UpstreamError, UpstreamPool


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    # Chat templates come from model files: hostile input, rendered only in the immutable sandbox.
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(template)


def render_chat_prompt(template: str, messages: list[Any]) -> str:
    """The text a chat request becomes. bos/eos strings are left empty: templates that print them count one
    token less than the engine does."""
    return _compile(template).render(
        messages=messages, add_generation_prompt=True, bos_token="", eos_token="", raise_exception=_raise
    )


async def count_tokens(pool: UpstreamPool, endpoint: Endpoint, text: str) -> int | None:
    """Ask the engine how many tokens `text` is; None when it cannot say."""
    try:
        reply = await pool.post(endpoint, json.dumps({"input": text}).encode())
    except UpstreamError:
        return None
    try:
        answer = await reply.read()
    except UpstreamError:
        return None
    finally:
        reply.release()
    try:
        count = json.loads(answer).get("count") if reply.status == 200 else None
    except (ValueError, AttributeError):
        return None
    return count if isinstance(count, int) else None


def prompt_text(route: str, body: dict[str, Any], template: str | None) -> str | None:
    """The prompt as text, or None when it cannot be built here."""
    if route == "/v1/completions":
        prompt = body.get("prompt")
        return prompt if isinstance(prompt, str) else None
    if template is None:
        return None
    try:
        return render_chat_prompt(template, body["messages"])
    except jinja2.TemplateError:
        return None
