"""OpenAI's Responses API (`POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`, `GET .../input_items`) over
the gateway's chat completions core: the request is read into a chat request (responses_request.py), served by the
core in process (app.service.dialects.inner), and its answer written back as a response object or the Responses event
stream (responses_stream.py). Responses are kept in the store (response_store.py) unless `store` is false, for
`previous_response_id` and retrieval. The core's errors pass through as it wrote them: they are in OpenAI's shape
already (a prompt over the context is its 400 `context_length_exceeded`)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from typing import Any

from app.service.dialects.inner import (
    AsgiApp,
    BadBody,
    InnerAnswer,
    call_core,
    error_message,
    read_json_object,
    sse_events,
)
from app.service.dialects.response_store import ResponseStore, StoredResponse
from app.service.dialects.responses_answer import ResponseDraft, completed, output_messages
from app.service.dialects.responses_items import input_items, item_page
from app.service.dialects.responses_request import ResponsesRequest, read_request
from app.service.dialects.responses_stream import ResponseEvents, encode
from app.service.gateway.validation import InvalidRequest
from app.service.http.asgi import ClientGone, Receive, Scope, Send, send_bytes, send_error, send_json
from app.service.http.routes import send_not_allowed

PATH = "/v1/responses"
_CHAT = "/v1/chat/completions"
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
log = logging.getLogger("modeldeck.responses")
_CODES = {400: "invalid_request_error", 401: "invalid_api_key", 403: "host_not_allowed", 404: "not_found"}


class ResponsesDialect:
    """The Responses API's routes; `store` None keeps nothing (every request is as `store: false`)."""

    def __init__(self, core: AsgiApp, store: ResponseStore | None, max_body_bytes: int) -> None:
        self._core = core
        self._store = store
        self._max_body_bytes = max_body_bytes

    def owns(self, path: str) -> bool:
        return path == PATH or path.startswith(PATH + "/")

    async def send_error(self, send: Send, status: int, message: str, kind: str) -> None:
        await send_error(send, status, message, kind, _CODES.get(status))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._route(scope, receive, send)
        except sqlite3.Error as exc:  # in a read, before any answer began: a failed write is only logged
            log.error("the response store failed: %s", exc)
            await send_error(send, 500, f"The response store failed: {exc}.", "server_error", "store_failed")

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        if path == PATH:
            if method == "POST":
                await self._create(scope, receive, send)
            else:
                await send_not_allowed(send, method, path, ["POST"])
            return
        response_id, _, rest = path[len(PATH) + 1 :].partition("/")
        if rest == "input_items" and response_id:
            if method == "GET":
                await self._input_items(send, response_id, scope.get("query_string", b""))
            else:
                await send_not_allowed(send, method, path, ["GET"])
        elif not response_id or rest:
            await send_error(send, 404, f"Unknown route {path}.", "invalid_request_error", "unknown_url")
        elif method == "GET":
            await self._retrieve(send, response_id)
        elif method == "DELETE":
            await self._delete(send, response_id)
        else:
            await send_not_allowed(send, method, path, ["GET", "DELETE"])

    async def _retrieve(self, send: Send, response_id: str) -> None:
        stored = await self._store.get(response_id) if self._store is not None else None
        if stored is None:
            await _not_found(send, response_id)
        else:
            await send_json(send, 200, stored.response)

    async def _input_items(self, send: Send, response_id: str, query: bytes) -> None:
        stored = await self._store.get(response_id) if self._store is not None else None
        if stored is None:
            await _not_found(send, response_id)
            return
        try:
            page = item_page(stored.input_items, query)
        except InvalidRequest as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", exc.code, exc.param)
            return
        await send_json(send, 200, page)

    async def _delete(self, send: Send, response_id: str) -> None:
        if self._store is not None and await self._store.delete(response_id):
            await send_json(send, 200, {"id": response_id, "object": "response", "deleted": True})
        else:
            await _not_found(send, response_id)

    async def _create(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_json_object(scope, receive, self._max_body_bytes)
            request = read_request(body)
        except ClientGone:
            return
        except BadBody as exc:
            await send_error(send, exc.status, str(exc), "invalid_request_error")
            return
        except InvalidRequest as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", exc.code, exc.param)
            return
        history: list[dict[str, Any]] = []
        if request.previous_response_id is not None:
            previous = await self._store.get(request.previous_response_id) if self._store is not None else None
            if previous is None:
                message = f"Previous response with id '{request.previous_response_id}' not found."
                await send_error(send, 404, message, "invalid_request_error", "previous_response_not_found",
                                 "previous_response_id")  # fmt: skip
                return
            history = previous.messages
        conversation = [*history, *request.input]
        system = [{"role": "system", "content": request.instructions}] if request.instructions else []
        payload = {**request.chat, "messages": [*system, *conversation]}
        if request.stream:
            payload |= {"stream": True, "stream_options": {"include_usage": True}}
        answer = await call_core(self._core, scope, receive, _CHAT, payload)
        if answer.status != 200:  # OpenAI's error shape already, or the core's own words for a failure
            await send_bytes(send, answer.status, await answer.read(), answer.headers)
            return
        if request.stream:
            await self._stream(send, request, answer, conversation)
        else:
            response = completed(ResponseDraft(request), await answer.json())
            await self._keep(request, response, conversation)
            await send_json(send, 200, response)

    async def _stream(
        self, send: Send, request: ResponsesRequest, answer: InnerAnswer, conversation: list[Any]
    ) -> None:
        """The core's chat stream as the Responses event stream; the response is stored before its last event is
        sent, so that a client that retrieves it as soon as the stream ends finds it."""
        events = ResponseEvents(ResponseDraft(request))
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        await _send_events(send, events.start())
        async for chunk in sse_events(answer.chunks()):
            if "error" in chunk:  # the core's words for an engine that failed after its first event
                await _send_events(send, events.fail(error_message(chunk)[0]))
                break
            await _send_events(send, events.feed(chunk))
        else:
            if events.finished:
                *closing, last = events.finish()
                await _send_events(send, iter(closing))
                await self._keep(request, events.body, conversation)
                await _send_events(send, iter([last]))
            else:  # the client left, or the core ended the stream early
                await _send_events(send, events.fail("The answer ended before the model finished it."))
        await send({"type": "http.response.body", "body": b""})

    async def _keep(self, request: ResponsesRequest, response: dict[str, Any], conversation: list[Any]) -> None:
        """Store the response; a disk that refuses it costs its retrieval and continuation, not the answer."""
        if request.store and self._store is not None:
            messages = [*conversation, *output_messages(response["output"])]
            items = input_items(request.raw_input)
            stored = StoredResponse(response["id"], float(response["created_at"]), response, messages, items)
            try:
                await self._store.put(stored)
            except (sqlite3.Error, OSError) as exc:
                log.error("could not store response %s: %s", response["id"], exc)


async def _send_events(send: Send, events: Iterator[dict[str, Any]]) -> None:
    body = b"".join(encode(event) for event in events)
    if body:
        await send({"type": "http.response.body", "body": body, "more_body": True})


async def _not_found(send: Send, response_id: str) -> None:
    await send_error(send, 404, f"Response with id '{response_id}' not found.", "invalid_request_error", "not_found")
