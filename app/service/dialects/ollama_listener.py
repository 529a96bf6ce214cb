"""`modeldeck serve --ollama-port N`: a second listener, on loopback only, serving Ollama's API and nothing else, for
the tools that only know Ollama's address (127.0.0.1:11434) and cannot be given a path.

It checks the Host header (DNS rebinding) and the endpoint's API key as the endpoint does. Without the key is the
user's explicit choice (`--ollama-no-key`), as Ollama itself serves: any program on this machine can then use the
models. Web pages still cannot: a request carrying an Origin must be JSON (app.service.dialects.ollama), which a
browser only sends after a CORS preflight that this listener never grants.
"""

from __future__ import annotations

import json

from app.service.dialects.inner import AsgiApp
from app.service.dialects.ollama import OllamaDialect
from app.service.engines import EngineManager
from app.service.http.asgi import LOOPBACK_HOSTS, Receive, Scope, Send, host_allowed, key_ok
from app.service.http.http_server import HttpServer
from app.service.http.limits import HttpLimits


class OllamaListenerApp:
    """Only Ollama's API, its Host and key checked; `api_key` None: no key asked."""

    def __init__(self, dialect: OllamaDialect, api_key: str | None) -> None:
        self._dialect = dialect
        self._api_key = api_key

    def set_api_key(self, api_key: str) -> None:
        """Check requests against this key from now on (the endpoint's was replaced); a keyless listener stays so."""
        if self._api_key is not None:
            self._api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        dialect = self._dialect
        if not host_allowed(scope, LOOPBACK_HOSTS):
            await dialect.send_error(send, 403, "Host not allowed.", "permission_error")
        elif self._api_key is not None and not key_ok(scope, self._api_key):
            message = "Missing or invalid API key (Authorization: Bearer ... or x-api-key: ...)."
            await dialect.send_error(send, 401, message, "authentication_error")
        elif not dialect.owns(scope["path"]):
            await dialect.send_error(send, 404, f"Unknown route {scope['path']}: this port serves Ollama's API.", "")
        else:
            await dialect(scope, receive, send)


def ollama_error_body(status: int, message: str) -> bytes:
    """An error the listener's HTTP server answers by itself, in Ollama's shape."""
    return json.dumps({"error": message}).encode()


def ollama_app(core: AsgiApp, manager: EngineManager, api_key: str | None, keyless: bool, max_body_bytes: int
               ) -> OllamaListenerApp:  # fmt: skip
    """The listener's app: the endpoint's `api_key` asked, unless `keyless` (the user's explicit choice)."""
    return OllamaListenerApp(OllamaDialect(core, manager, max_body_bytes), None if keyless else api_key)


def ollama_server(app: OllamaListenerApp, max_body_bytes: int, max_connections: int) -> HttpServer:
    """The listener's HTTP server, with the endpoint's limits."""
    limits = HttpLimits(max_body_bytes=max_body_bytes, max_connections=max_connections)
    return HttpServer(app, ollama_error_body, limits)
