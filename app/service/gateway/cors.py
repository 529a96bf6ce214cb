"""CORS for the endpoint: only origins the user listed get a grant, never a wildcard."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from app.service.http.asgi import Message, Send, send_error


async def preflight(send: Send, origin: bytes | None) -> None:
    """Answer a CORS preflight: the grant for an origin the user listed, else a 403."""
    if origin is None:  # no CORS grant unless the user listed this origin
        await send_error(send, 403, "Cross-origin requests are not allowed.", "permission_error")
        return
    headers = [
        (b"access-control-allow-origin", origin),
        (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
        (b"access-control-allow-headers", b"authorization, content-type"),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def adding_cors_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Callable[[Message], Awaitable[None]]:
    """`send`, with `extra` headers added to the answer's head."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return wrapped
