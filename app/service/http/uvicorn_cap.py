"""uvicorn's httptools protocol with the connection cap of app/service/http/connection_cap.py (the control API's server,
and the gateway's when --gateway-server uvicorn). uvicorn has no cap of its own: `limit_concurrency` answers 503 but
keeps every connection open, and a connection that never sends a request is kept forever."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.service.http.connection_cap import NoRoom, busy_answer, make_room


class CappedHttpToolsProtocol(HttpToolsProtocol):
    """Keeps at most `max_connections` open: the longest idle one is closed for a newcomer, or the newcomer is
    refused with a 503 when every connection is busy."""

    max_connections = 256

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.idle_since: float | None = time.monotonic()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peers = [c for c in self.connections if isinstance(c, CappedHttpToolsProtocol)]
        try:
            evicted = make_room(peers, self.max_connections, self)
        except NoRoom:
            self.connections.discard(self)
            self.idle_since = None
            body = json.dumps({"error": "Too many connections; try again shortly."}).encode()
            transport.write(busy_answer(body))
            transport.close()
            return
        if evicted is not None:
            self.connections.discard(evicted)

    def close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def on_message_begin(self) -> None:
        self.idle_since = None
        super().on_message_begin()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.pipeline and not self.transport.is_closing():
            self.idle_since = time.monotonic()


def capped_protocol(max_connections: int) -> type[CappedHttpToolsProtocol]:
    """The protocol class for one server, with its own cap."""
    return type("CappedHttpToolsProtocol", (CappedHttpToolsProtocol,), {"max_connections": max_connections})
