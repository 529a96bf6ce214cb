"""Prompts past the engine's limits, refused before the engine sees them with OpenAI's 400
`context_length_exceeded`, naming the field, its tokens, the limit and what to do. Left to the engines, a chat
streamed past llama-cpp-python's context ended empty (a 502 here), its embeddings cut each input to its batch without
a word, and llama-server's embedding process answered a 500 asking for a larger physical batch.

A prompt is counted by the engine's own tokenizer (and a chat's rendered by its template first) only when it could
be past the limit. A byte-level BPE tokenizer, as the GGUF engines' are, makes at most one token of each byte of a
text, plus the special tokens it adds; the request body holds every byte of the prompt's text (JSON only lengthens
it), so a body shorter than the limit, less a margin for those and the chat template, cannot be past it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from app.service.gateway.features import CHAT
from app.service.gateway.prompt_tokens import count_tokens, prompt_text
from app.service.gateway.templates import TemplateRenderer
from app.service.gateway.upstream import UpstreamPool
from app.service.gateway.upstream_endpoint import Endpoint
from app.service.gateway.validation import InvalidRequest, is_token_input
from app.service.launch.route import Route
from engines.base import InputLimit

EMBEDDINGS = "/v1/embeddings"
SPECIAL_TOKENS = 8  # BOS, EOS and the like, which a tokenizer adds to a text
# A chat template's markers around each message (start, role, end) beside its own text: a few tokens in practice.
# A template that adds more per message can escape the bound; the engine then judges the prompt itself.
MESSAGE_TOKENS = 64

Count = Callable[[str], Awaitable[int | None]]


@dataclass(frozen=True)
class PromptCheck:
    """What checking a prompt found: why it is refused, if it is, and its tokens when they had to be counted."""

    refusal: InvalidRequest | None = None
    prompt_tokens: int | None = None  # of a chat or a completion, counted because it could be past the context


_PASSED = PromptCheck()


def context_exceeded(message: str, param: str) -> InvalidRequest:
    """The refusal of a prompt past a model's limits, in OpenAI's words for it."""
    return InvalidRequest(message, param, code="context_length_exceeded")


@functools.lru_cache(maxsize=16)
def _utf8_length(text: str) -> int:
    return len(text.encode())


class PromptLimits:
    """Checks prompts against the limits of the engine at a route: its context, and for embeddings the most tokens
    its embedding process takes in one input."""

    def __init__(
        self,
        pool: UpstreamPool,
        templates: TemplateRenderer,
        endpoint: Callable[[Route, str], Endpoint],
        context_length: Callable[[str], int | None],
    ) -> None:
        self._pool = pool
        self._templates = templates
        self._endpoint = endpoint
        self._context_length = context_length

    async def check(self, path: str, body: bytes, payload: dict[str, Any], route: Route) -> PromptCheck:
        """Whether the prompt is past the limits of the engine at `route` (ready). Passed when it cannot be known
        here (no tokenizer route, no chat template): the engine judges it then."""
        if path == EMBEDDINGS:
            limit = route.embedding_limit
            if limit is None or len(body) + SPECIAL_TOKENS <= limit.tokens:
                return _PASSED
            return PromptCheck(await self._input_refusal(payload["input"], limit, route))
        context = self._context_length(route.model)
        if context is None:
            return _PASSED
        margin = SPECIAL_TOKENS
        if path == CHAT:
            if route.chat_template is None:
                return _PASSED
            margin += _utf8_length(route.chat_template) + MESSAGE_TOKENS * len(payload["messages"])
        if len(body) + margin < context or (count := self._counter(route)) is None:
            return _PASSED
        text = await prompt_text(path, payload, route.chat_template, self._templates)
        tokens = await count(text) if text is not None else None
        if tokens is None or tokens < context:  # both engines need room for one token more
            return PromptCheck(prompt_tokens=tokens)
        field, made = ("messages", " with the model's chat template") if path == CHAT else ("prompt", "")
        return PromptCheck(context_exceeded(
            f"This model's maximum context length is {context} tokens, and your {field} resulted in {tokens} "
            f"tokens{made}, which leaves no room for a completion. Send a shorter prompt, or start `{route.model}` "
            f"with a longer context (its `context` load setting, or `modeldeck start {route.model} --context N`).",
            field,
        ), tokens)  # fmt: skip

    async def prompt_tokens(self, path: str, payload: dict[str, Any], route: Route) -> int | None:
        """The prompt's tokens as the engine at `route` (ready) counts them, its chat template rendered first; None
        when it cannot be known here (no tokenizer route, no chat template, a template that fails)."""
        count = self._counter(route)
        if count is None or (path == CHAT and route.chat_template is None):
            return None
        text = await prompt_text(path, payload, route.chat_template, self._templates)
        return await count(text) if text is not None else None

    async def _input_refusal(self, given: Any, limit: InputLimit, route: Route) -> InvalidRequest | None:
        """The first input past `limit`, refused naming its index: text, or token ids (already counted)."""
        count = self._counter(route)
        single = isinstance(given, str) or (is_token_input(given) and not isinstance(given[0], list))
        for index, text in enumerate([given] if single else given):
            if isinstance(text, list):
                tokens: int | None = len(text)
            elif count is None or len(text.encode()) + SPECIAL_TOKENS <= limit.tokens:
                continue
            else:
                tokens = await count(text)
            if tokens is not None and tokens > limit.tokens:
                param = "input" if single else f"input[{index}]"
                return context_exceeded(
                    f"`{param}` is {tokens} tokens, more than the {limit.tokens} tokens {route.engine_name} embeds of "
                    f"one input ({limit.set_by}). Send a shorter input, or split it into several.",
                    param,
                )
        return None

    def _counter(self, route: Route) -> Count | None:
        """How the engine at `route` counts a text's tokens; None when it has no route for it."""
        capabilities = route.capabilities
        path, listed = capabilities.tokenize_count_path, False
        if path is None:
            path, listed = capabilities.tokenize_path, True
        if path is None or route.url is None:
            return None
        endpoint = self._endpoint(route, path)
        return lambda text: count_tokens(self._pool, endpoint, text, listed)
