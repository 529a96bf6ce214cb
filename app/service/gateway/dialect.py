"""What the gateway asks of a dialect it serves besides OpenAI's (app.service.dialects): the paths it owns, its
error shape (for the gateway's own refusals: Host, key), and its handler."""

from __future__ import annotations

from typing import Protocol

from app.service.http.asgi import Receive, Scope, Send, send_error

_EDGE_CODES = {403: "host_not_allowed", 401: "invalid_api_key"}


class Dialect(Protocol):
    def owns(self, path: str) -> bool:
        """Whether `path` is one of this dialect's."""

    async def send_error(self, send: Send, status: int, message: str, kind: str) -> None:
        """An error answer in the dialect's shape; `kind` is OpenAI's error type."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a request whose Host and key the gateway has checked."""


async def send_openai_edge_error(send: Send, status: int, message: str, kind: str) -> None:
    """The gateway's own refusal of an OpenAI request (Host, key), as OpenAI's clients read it."""
    await send_error(send, status, message, kind, _EDGE_CODES.get(status))
