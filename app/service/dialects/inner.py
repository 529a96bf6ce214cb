"""One OpenAI-shaped request served by the gateway in process, for the dialects that translate to it.

A dialect (Anthropic's Messages, Ollama's API, OpenAI's Responses) is a client of the gateway's OpenAI core: its
request goes through the same path as any other (admission, JIT start, TTL, limits, metering, the request log,
cancellation when the client leaves), and its answer comes back as the OpenAI client would read it, to be written
again in the dialect's words. No socket is involved: the core is called as the ASGI app it is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from app.bounded_json import load_body
from app.service.http.asgi import DIRECT_BODY, BodyTooLarge, Message, Receive, Scope, Send, header, read_body

AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]
_DROPPED_HEADERS = frozenset({b"content-type", b"content-length", b"transfer-encoding", b"origin"})


class BadBody(Exception):
    """A request body a dialect cannot read: `status` (400, 413 or 415) and a sentence saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_json_object(scope: Scope, receive: Receive, limit: int) -> dict[str, Any]:
    """A dialect's JSON request body, an object within `limit` bytes and the nesting bounds of app.bounded_json;
    BadBody otherwise. ClientGone (app.service.http.asgi) when the client left before its body came."""
    content_type = (header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
    try:
        raw = await read_body(receive, limit)
    except BodyTooLarge:
        raise BadBody(413, f"Request body over {limit} bytes.") from None
    if content_type != b"application/json":
        raise BadBody(415, "Content-Type must be application/json.")
    try:
        body = load_body(raw)
    except ValueError as exc:  # BadJson, LoneSurrogate, UnicodeDecodeError
        raise BadBody(400, f"Request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadBody(400, "The request body must be a JSON object.")
    return body


class InnerAnswer:
    """The core's answer: `status` and `headers` once it started answering, then the body as it comes."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], messages: asyncio.Queue[Message | None],
                 task: asyncio.Task[None]) -> None:  # fmt: skip
        self.status = status
        self.headers = headers
        self._messages = messages
        self._task = task

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's pieces as the core sends them; ends with the answer."""
        while (message := await self._messages.get()) is not None:
            body = message.get("body", b"")
            if body:
                yield body
            if not message.get("more_body", False):
                break
        await self._task  # the core has logged the request once its handler returns

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def json(self) -> Any:
        """The whole body as JSON; {} when it is not JSON (never expected from the core)."""
        try:
            return json.loads(await self.read())
        except ValueError:
            return {}


async def call_core(core: AsgiApp, scope: Scope, receive: Receive, path: str, payload: dict[str, Any]) -> InnerAnswer:
    """POST `payload` to `path` of the core, with the client's headers (its key, its Host) and its connection: when
    the client goes away, the core sees it leave and cancels the request upstream."""
    headers = [(name, value) for name, value in scope["headers"] if name not in _DROPPED_HEADERS]
    extensions = {name: value for name, value in scope.get("extensions", {}).items() if name != DIRECT_BODY}
    inner_scope = {**scope, "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
                   "headers": [*headers, (b"content-type", b"application/json")], "extensions": extensions}  # fmt: skip
    body: bytes | None = json.dumps(payload).encode()

    async def inner_receive() -> Message:
        nonlocal body
        if body is not None:
            message, body = {"type": "http.request", "body": body, "more_body": False}, None
            return message
        return await receive()

    messages: asyncio.Queue[Message | None] = asyncio.Queue()

    async def inner_send(message: Message) -> None:
        messages.put_nowait(message)

    async def serve() -> None:
        try:
            await core(inner_scope, inner_receive, inner_send)
        finally:
            messages.put_nowait(None)

    task = asyncio.create_task(serve())
    start = await messages.get()
    if start is None:  # the core returned without answering: only when the service stops
        await task
        raise asyncio.CancelledError
    return InnerAnswer(start["status"], list(start.get("headers", [])), messages, task)


async def sse_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The JSON of each `data:` event of an OpenAI stream, up to `data: [DONE]`; an event that is not JSON
    is passed on as {"error": {"message": ...}}."""
    pending = b""
    async for chunk in chunks:
        pending = (pending + chunk).replace(b"\r\n", b"\n")  # sse-starlette (llama-cpp-python) ends lines so
        *events, pending = pending.split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                try:
                    decoded = json.loads(data)
                except ValueError:
                    decoded = {"error": {"message": data.decode("utf-8", "replace")}}
                if isinstance(decoded, dict):
                    yield decoded


def error_message(answer: Any) -> tuple[str, str]:
    """The message and the OpenAI error type of an error body from the core."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or "The request failed."), str(error.get("type") or "server_error")
    return "The request failed.", "server_error"
