"""Small helpers for the raw ASGI apps: reading bodies with a limit, JSON answers, OpenAI-shaped errors.

The apps are raw ASGI on purpose: no router, middleware or validation layer on the proxy's hot path.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DIRECT_BODY = "modeldeck.direct_body"  # scope["extensions"] key of a server's DirectBody, where it has one
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
JSON_HEADERS = [(b"content-type", b"application/json")]


class DirectBody(Protocol):
    """A server extension (app.service.http.http_server): response body bytes written to the client at once, from any
    callback, with no message per write. Only after http.response.start; the last body message ends the answer."""

    def write(self, data: bytes) -> None: ...

    def watch_pressure(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """`pause` is called while the client does not keep up with what is written to it, `resume` after."""

    @property
    def closed(self) -> bool: ...


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class BodyTooLarge(Exception):
    """The request body is over the limit."""


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def host_name(host: str) -> str:
    """The name part of a Host header value: `[::1]:8642` -> `[::1]`, `localhost:8642` -> `localhost`."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    return host.split(":", 1)[0]


def host_allowed(scope: Scope, allowed: frozenset[str]) -> bool:
    """Check the Host header against the allowlist (DNS rebinding), whatever the port."""
    raw = header(scope, b"host")
    return raw is not None and host_name(raw.decode("latin-1")) in allowed


def bearer_ok(scope: Scope, expected: str) -> bool:
    raw = header(scope, b"authorization") or b""
    scheme, _, token = raw.decode("latin-1").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


def key_ok(scope: Scope, expected: str) -> bool:
    """The key as a bearer token (OpenAI's clients, Ollama's with a header) or as `x-api-key` (Anthropic's)."""
    if bearer_ok(scope, expected):
        return True
    other = header(scope, b"x-api-key")
    return other is not None and hmac.compare_digest(other.strip(), expected.encode())


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_bytes(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = JSON_HEADERS
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, payload: Any, extra_headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, status, json.dumps(payload).encode(), [*JSON_HEADERS, *extra_headers])


def openai_error(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An error body in the shape OpenAI's API and clients expect."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


async def send_error(
    send: Send,
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    param: str | None = None,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    await send_json(send, status, openai_error(message, kind, code, param), headers)


async def wait_disconnect(receive: Receive) -> None:
    """Return when the client has gone away."""
    while (await receive())["type"] != "http.disconnect":
        pass
