"""Anthropic's Messages API on the endpoint: `POST /v1/messages` (streamed or not) and
`POST /v1/messages/count_tokens`, so that Anthropic's own clients work against ModelDeck.

A thin translation over the gateway's OpenAI core (app.service.dialects.inner): the request is checked and written
as an OpenAI chat request (anthropic_request), served by the core as any other, and its answer written back in
Anthropic's words (anthropic_answer, anthropic_stream), errors included, their HTTP status kept. Token counts come
from the model's own tokenizer through its chat template (app.service.gateway.prompt_count).
"""

from __future__ import annotations

from collections.abc import Iterable

from app.service.dialects import anthropic_answer as answers
from app.service.dialects.anthropic_request import AnthropicInvalid, Translated, translate
from app.service.dialects.anthropic_stream import StreamTranslation, sse
from app.service.dialects.inner import AsgiApp, BadBody, call_core, error_message, read_json_object, sse_events
from app.service.gateway.prompt_count import PromptCounter
from app.service.http.asgi import ClientGone, Receive, Scope, Send, send_json

MESSAGES, COUNT_TOKENS = "/v1/messages", "/v1/messages/count_tokens"
_CHAT = "/v1/chat/completions"
_STREAM_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
_KEPT_ERROR_HEADERS = frozenset({b"retry-after"})


class AnthropicDialect:
    """The Messages API's two routes; `core` is the gateway's OpenAI core, `counter` counts prompts' tokens."""

    def __init__(self, core: AsgiApp, counter: PromptCounter, max_body_bytes: int) -> None:
        self._core = core
        self._counter = counter
        self._max_body_bytes = max_body_bytes

    def owns(self, path: str) -> bool:
        return path in (MESSAGES, COUNT_TOKENS)

    async def send_error(self, send: Send, status: int, message: str, kind: str) -> None:
        """The gateway's own refusals (Host, key) as Anthropic's clients read them: the status says the type."""
        await _send_error(send, status, message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if method != "POST":
            message = f"Method {method} is not allowed for {path}: POST only."
            await _send_error(send, 405, message, [(b"allow", b"POST")])
            return
        try:
            body = await read_json_object(scope, receive, self._max_body_bytes)
            request = translate(body, counting=path == COUNT_TOKENS)
        except ClientGone:
            return
        except BadBody as exc:
            await _send_error(send, exc.status, str(exc))
            return
        except AnthropicInvalid as exc:
            await _send_error(send, 400, str(exc))
            return
        if path == COUNT_TOKENS:
            await self._count_tokens(send, request)
        else:
            await self._message(scope, receive, send, request)

    async def _count_tokens(self, send: Send, request: Translated) -> None:
        counted = await self._counter.count_chat(request.payload)
        if counted.tokens is None:
            await _send_error(send, counted.status, counted.message)
        else:
            await send_json(send, 200, {"input_tokens": counted.tokens})

    async def _message(self, scope: Scope, receive: Receive, send: Send, request: Translated) -> None:
        answer = await call_core(self._core, scope, receive, _CHAT, request.payload)
        if answer.status != 200:
            message, _ = error_message(await answer.json())
            kept = [(name, value) for name, value in answer.headers if name in _KEPT_ERROR_HEADERS]
            await _send_error(send, answer.status, message, kept)
            return
        if not request.stream:
            await send_json(send, 200, answers.message(await answer.json(), request.model))
            return
        await send({"type": "http.response.start", "status": 200, "headers": _STREAM_HEADERS})
        translation = StreamTranslation(request.model)
        await send({"type": "http.response.body", "body": translation.start(), "more_body": True})
        async for event in sse_events(answer.chunks()):
            out = translation.feed(event)
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
        if translation.ended:
            last = b""
        elif translation.finished:
            last = translation.finish()
        else:  # the core's stream ended before the model's last event: no message_stop that would pass it for whole
            message = "The stream ended before the model finished."
            last = sse("error", answers.error_body("api_error", message))
        await answer.read()  # what the core sends after its [DONE]: its request is logged once it returns
        await send({"type": "http.response.body", "body": last})


async def _send_error(send: Send, status: int, message: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_json(send, status, answers.error_body(answers.error_type(status), message), headers)
