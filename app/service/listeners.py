"""The service's two listeners: the OpenAI endpoint on ModelDeck's own HTTP server (or uvicorn) and the control API
on uvicorn, each with its connection cap and timeouts (app.service.http)."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
from collections.abc import Callable, Generator
from typing import Protocol

import uvicorn

from app.service.gateway.gateway import Gateway
from app.service.http.asgi import openai_error
from app.service.http.http_server import HttpServer
from app.service.http.limits import HttpLimits
from app.service.http.tls import TlsIdentity
from app.service.http.uvicorn_cap import capped_protocol

log = logging.getLogger("modeldeck.service")


class UvicornListener(uvicorn.Server):
    """uvicorn without its own signal handling: the service stops both listeners and the engines together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def serve_socket(self, sock: socket.socket) -> None:
        await self.serve(sockets=[sock])

    def stop(self) -> None:
        self.should_exit = True


class Listener(Protocol):
    """A server of one listening socket: the endpoint's or the control API's."""

    started: bool

    async def serve_socket(self, sock: socket.socket) -> None: ...

    def stop(self) -> None: ...


def uvicorn_listener(
    app: Callable[..., object], max_connections: int, tls: TlsIdentity | None = None
) -> UvicornListener:
    # No proxy-headers middleware: clients' X-Forwarded-* are not to be believed, and it costs every request.
    config = uvicorn.Config(
        app, http=capped_protocol(max_connections), loop="none", lifespan="off", access_log=False, log_level="warning",
        proxy_headers=False, timeout_graceful_shutdown=2, timeout_keep_alive=30,
        ssl_certfile=tls.cert_path if tls else None, ssl_keyfile=tls.key_path if tls else None,
    )  # fmt: skip
    return UvicornListener(config)


def gateway_listener(
    gateway: Gateway, which: str, max_body_bytes: int, max_connections: int, tls: TlsIdentity | None
) -> Listener:
    """The endpoint's server: ModelDeck's own, or uvicorn when `which` says so."""
    if which == "uvicorn":
        return uvicorn_listener(gateway, max_connections, tls)
    limits = HttpLimits(max_body_bytes=max_body_bytes, max_connections=max_connections)
    return HttpServer(gateway, gateway_error_body, limits, tls.server_context() if tls else None)


def gateway_error_body(status: int, message: str) -> bytes:
    """An error the gateway's HTTP server answers by itself, shaped as OpenAI's."""
    return json.dumps(openai_error(message, "server_error" if status >= 500 else "invalid_request_error")).encode()


def log_tls(tls: TlsIdentity) -> None:
    """The serve banner's TLS lines: what a client checks, and how it trusts the certificate."""
    kind = "self-signed certificate made by ModelDeck" if tls.own else "certificate"
    log.info("TLS: %s %s, SHA-256 fingerprint %s", kind, tls.cert_path, tls.fingerprint)
    if tls.own:
        log.info("clients trust it with: curl --cacert %s, or in Python ssl.create_default_context(cafile=...)",
                 tls.cert_path)  # fmt: skip
    if tls.note:
        log.warning("TLS: %s", tls.note)
