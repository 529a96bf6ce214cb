"""The OpenAI-compatible endpoint (/v1): authenticates, routes by `model`, and streams engine answers through.

Bytes from the engine are forwarded as they arrive, never parsed or re-serialized.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from app.service.asgi import (
    LOOPBACK_HOSTS,
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    bearer_ok,
    header,
    host_allowed,
    openai_error,
    read_body,
    send_error,
    send_json,
    wait_disconnect,
)
from app.service.engines import EngineManager
from engines.states import EngineState

PROXIED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
_FORWARDED_RESPONSE_HEADERS = frozenset({"content-type", "cache-control"})


@dataclass(frozen=True)
class GatewayConfig:
    api_key: str | None  # None only on loopback, by the user's explicit choice
    allowed_hosts: frozenset[str] = LOOPBACK_HOSTS
    max_body_bytes: int = 8 * 1024 * 1024
    start_timeout_s: float = 300.0


class Gateway:
    """Raw ASGI app serving /v1. `session` is the shared upstream pool, opened by the server."""

    def __init__(self, manager: EngineManager, config: GatewayConfig, session: aiohttp.ClientSession) -> None:
        self._manager = manager
        self._config = config
        self._session = session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not host_allowed(scope, self._config.allowed_hosts):
            await send_error(send, 403, "Host not allowed.", "permission_error", "host_not_allowed")
            return
        if self._config.api_key is not None and not bearer_ok(scope, self._config.api_key):
            await send_error(
                send, 401, "Missing or invalid API key (Authorization: Bearer ...).", "authentication_error",
                "invalid_api_key",
            )  # fmt: skip
            return
        path, method = scope["path"], scope["method"]
        if path == "/v1/models" and method == "GET":
            await send_json(send, 200, self._model_list())
        elif path in PROXIED_PATHS and method == "POST":
            await self._proxy(scope, receive, send)
        elif path in PROXIED_PATHS or path == "/v1/models":
            await send_error(send, 405, f"Method {method} not allowed on {path}.", "invalid_request_error")
        else:
            await send_error(send, 404, f"Unknown route {path}.", "invalid_request_error", "unknown_url")

    def _model_list(self) -> dict[str, Any]:
        data = []
        for model_id in self._manager.models:
            described = self._manager.describe(model_id)
            data.append({"id": model_id, "object": "model", "created": 0, "owned_by": "modeldeck",
                         "state": described["state"]})  # fmt: skip
        return {"object": "list", "data": data}

    async def _proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        content_type = (header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
        try:
            body = await read_body(receive, self._config.max_body_bytes)
        except ClientGone:
            return
        except BodyTooLarge:
            limit = self._config.max_body_bytes
            await send_error(send, 413, f"Request body over {limit} bytes.", "invalid_request_error")
            return
        if content_type != b"application/json":
            await send_error(send, 415, "Content-Type must be application/json.", "invalid_request_error")
            return
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            await send_error(send, 400, f"Request body is not valid JSON: {exc}", "invalid_request_error")
            return
        if not isinstance(payload, dict):
            await send_error(send, 400, "Request body must be a JSON object.", "invalid_request_error")
            return
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            await send_error(send, 400, "`model` is required.", "invalid_request_error", param="model")
            return
        if model not in self._manager.models:
            known = ", ".join(self._manager.models) or "none"
            await send_error(
                send, 404, f"The model `{model}` does not exist. Available models: {known}.",
                "invalid_request_error", "model_not_found", "model",
            )  # fmt: skip
            return
        base_url = await self._engine_url(model, send)
        if base_url is None:
            return
        # Forward while watching for the client to go away: then the upstream request is cancelled at once.
        forward = asyncio.create_task(self._forward(base_url + scope["path"], body, send, payload.get("stream")))
        gone = asyncio.create_task(wait_disconnect(receive))
        await asyncio.wait({forward, gone}, return_when=asyncio.FIRST_COMPLETED)
        for task in (forward, gone):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await forward

    async def _engine_url(self, model: str, send: Send) -> str | None:
        """The ready engine's URL, starting it on demand; answers the client itself when that fails."""
        supervisor = self._manager.supervisor(model)
        if supervisor is None or supervisor.state != EngineState.READY:
            try:
                state = await asyncio.wait_for(self._manager.start(model), self._config.start_timeout_s)
            except TimeoutError:
                await send_error(
                    send, 503, f"The model `{model}` did not become ready within "
                    f"{self._config.start_timeout_s:.0f} s.", "server_error", "model_start_timeout",
                )  # fmt: skip
                return None
            supervisor = self._manager.supervisor(model)
            if state != EngineState.READY or supervisor is None:
                message = self._manager.describe(model)["message"]
                await send_error(send, 503, f"The model `{model}` could not be started: {message}",
                                 "server_error", "model_unavailable")  # fmt: skip
                return None
        return supervisor.base_url

    async def _forward(self, url: str, body: bytes, send: Send, stream: object) -> None:
        headers = {
            "Authorization": f"Bearer {self._manager.internal_key}",
            "Content-Type": "application/json",
        }
        started = False
        try:
            async with self._session.post(url, data=body, headers=headers) as upstream:
                response_headers = [
                    (name.lower().encode("latin-1"), value.encode("latin-1"))
                    for name, value in upstream.headers.items()
                    if name.lower() in _FORWARDED_RESPONSE_HEADERS
                ]
                await send({"type": "http.response.start", "status": upstream.status, "headers": response_headers})
                started = True
                async for chunk in upstream.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except (aiohttp.ClientError, TimeoutError) as exc:
            message = f"The engine stopped answering: {exc.__class__.__name__}."
            if not started:
                await send_error(send, 502, message, "server_error", "engine_unavailable")
            elif stream:
                event = b"data: " + json.dumps(openai_error(message, "server_error", "engine_failed")).encode()
                await send({"type": "http.response.body", "body": event + b"\n\n", "more_body": False})
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
