"""uvicorn's httptools protocol with the connection table of app/service/http/connection_cap.py and the request timeouts
of ModelDeck's own server (the control API's server, and the gateway's when --gateway-server uvicorn). uvicorn has no
cap of its own: `limit_concurrency` answers 503 but keeps every connection open, and a connection that never sends a
request is kept forever. Nor has it a timeout on a request being received: a body shorter than its Content-Length
held the connection, and the handler waiting for it, until the client gave up."""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from app.service.http.asgi import openai_error
from app.service.http.connection_cap import ConnectionTable, busy_answer
from app.service.http.limits import HttpLimits

_TOO_SLOW = json.dumps(openai_error("The request was not received in time.", "invalid_request_error")).encode()


class CappedHttpToolsProtocol(HttpToolsProtocol):
    """Keeps at most `table.cap` connections open, making room at the cap as ModelDeck's own server does
    (ConnectionTable: the connection waiting the longest for its headers goes first, busy ones never). A request
    whose headers take over `header_timeout_s` (the first one's from the connection, later ones' from their first
    byte), or whose body takes over `body_timeout_s` after them, is answered 408 and the connection closed; a
    connection that sends nothing in that time is closed."""

    table: ClassVar[ConnectionTable[CappedHttpToolsProtocol]] = ConnectionTable(256)  # capped_protocol: one a server
    header_timeout_s = HttpLimits.header_timeout_s
    body_timeout_s = HttpLimits.body_timeout_s

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.client_host: str | None = None
        self._idle = False  # between two requests
        self._in_head = False  # a request's headers are arriving
        self._request_timer: asyncio.TimerHandle | None = None
        self._receiving: RequestResponseCycle | None = None  # the request whose body the timer waits for

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.client_host = self.client[0] if self.client else None
        if not self.table.admit(self):
            self.connections.discard(self)
            body = json.dumps({"error": "Too many connections; try again shortly."}).encode()
            transport.write(busy_answer(body))
            transport.close()
            return
        self._arm(self.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.table.discard(self)
        super().connection_lost(exc)

    def close(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        if self._idle:  # a pipelined request waits, unread, behind the one being answered (uvicorn pauses reading)
            self._idle = False
            self.table.waiting(self)
            self._arm(self.header_timeout_s)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self.table.busy(self)
        super().on_headers_complete()
        if self._request_timer is not None:
            self._receiving = self.cycle
            self._arm(self.body_timeout_s)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or self.pipeline:
            return
        if self._in_head:  # the next request has begun
            self.table.waiting(self)
            self._arm(self.header_timeout_s)
        else:  # uvicorn keeps no status: a 401's connection is not told apart here
            self._idle = True
            self.table.idle(self, refused=False)

    def _too_slow(self) -> None:
        self._request_timer = None
        cycle, self._receiving = self._receiving, None
        if self.transport.is_closing():
            return
        if cycle is None and not self._in_head:  # connected and silent
            self.transport.close()
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
    attributes = {"table": ConnectionTable(max_connections), "header_timeout_s": header_timeout_s,
                  "body_timeout_s": body_timeout_s}  # fmt: skip
    return type("CappedHttpToolsProtocol", (CappedHttpToolsProtocol,), attributes)
