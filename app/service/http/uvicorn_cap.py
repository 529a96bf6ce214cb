"""uvicorn's httptools protocol with the connection cap of app/service/http/connection_cap.py and the request timeouts
of ModelDeck's own server (the control API's server, and the gateway's when --gateway-server uvicorn). uvicorn has no
cap of its own: `limit_concurrency` answers 503 but keeps every connection open, and a connection that never sends a
request is kept forever. Nor has it a timeout on a request being received: a body shorter than its Content-Length
held the connection, and the handler waiting for it, until the client gave up."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.service.http.asgi import openai_error
from app.service.http.connection_cap import NoRoom, busy_answer, make_room
from app.service.http.http_server import HttpLimits

_TOO_SLOW = json.dumps(openai_error("The request was not received in time.", "invalid_request_error")).encode()


class CappedHttpToolsProtocol(HttpToolsProtocol):
    """Keeps at most `max_connections` open: the longest idle one is closed for a newcomer, or the newcomer is
    refused with a 503 when every connection is busy. A request whose headers take over `header_timeout_s` from
    its first byte, or whose body takes over `body_timeout_s` after them, is answered 408 and the connection closed."""

    max_connections = 256
    header_timeout_s = HttpLimits.header_timeout_s
    body_timeout_s = HttpLimits.body_timeout_s

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.idle_since: float | None = time.monotonic()
        self._request_timer: asyncio.TimerHandle | None = None
        self._receiving: RequestResponseCycle | None = None  # the request whose body the timer waits for

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

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def on_message_begin(self) -> None:
        self.idle_since = None
        answering = self.cycle is not None and not self.cycle.response_complete
        super().on_message_begin()
        # A pipelined request waits, unread, behind the one being answered (uvicorn pauses reading): not timed.
        if not answering:
            self._arm(self.header_timeout_s)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self._request_timer is not None:
            self._receiving = self.cycle
            self._arm(self.body_timeout_s)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.pipeline and not self.transport.is_closing():
            self.idle_since = time.monotonic()

    def _too_slow(self) -> None:
        self._request_timer = None
        cycle, self._receiving = self._receiving, None
        if self.transport.is_closing():
            return
        if cycle is None or not cycle.response_started:  # else the app answered without waiting for the body
            if cycle is not None:
                cycle.disconnected = True  # the handler reading the body gets http.disconnect, and sends nothing
            head = [b"HTTP/1.1 408 Request Timeout\r\n"]
            head += [b"%b: %b\r\n" % header for header in self.server_state.default_headers]
            head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                        % len(_TOO_SLOW))  # fmt: skip
            self.transport.write(b"".join(head) + _TOO_SLOW)
        self.transport.close()

    def _arm(self, seconds: float) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
        self._request_timer = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None
        self._receiving = None


def capped_protocol(
    max_connections: int,
    header_timeout_s: float = HttpLimits.header_timeout_s,
    body_timeout_s: float = HttpLimits.body_timeout_s,
) -> type[CappedHttpToolsProtocol]:
    """The protocol class for one server, with its own cap and request timeouts."""
    attributes = {"max_connections": max_connections, "header_timeout_s": header_timeout_s,
                  "body_timeout_s": body_timeout_s}  # fmt: skip
    return type("CappedHttpToolsProtocol", (CappedHttpToolsProtocol,), attributes)
