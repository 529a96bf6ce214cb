"""One HTTP request and its answer, for app/service/http/http_server.py: the ASGI `receive` and `send` callables
and the direct body path (DirectBody) that writes an engine's stream to the client from any callback."""

from __future__ import annotations

import asyncio
import http
import re
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import Protocol

from app.service.http.asgi import Message, Scope
from app.service.http.limits import HttpLimits

_INVALID_HEADER = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # CR, LF and other controls: no header injection
_DISCONNECT: Message = {"type": "http.disconnect"}


class ExchangeConnection(Protocol):
    """What an exchange needs of the connection it arrived on."""

    limits: HttpLimits
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport | None
    gone: bool
    closing: bool  # close once the answer in progress is written
    writing_paused: bool
    pressure: tuple[Callable[[], None], Callable[[], None]] | None

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def finish(self, exchange: Exchange) -> None: ...

    def answer_error(self, exchange: Exchange, status: int, message: str) -> None: ...


PHRASES = {status.value: status.phrase.encode() for status in http.HTTPStatus}


class DateHeader:
    """The Date header, formatted once a second."""

    second = 0
    value = b""

    @classmethod
    def header(cls) -> bytes:
        now = int(time.time())
        if now != cls.second:
            cls.second, cls.value = now, b"date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        return cls.value


class Exchange:
    """One request and its answer. `receive` and `send` are the ASGI callables; `write` and `watch_pressure` the
    direct body path (DirectBody)."""

    __slots__ = (
        "_body",
        "_body_size",
        "_chunked",
        "_conn",
        "_continue",
        "_framed",
        "_head",
        "_status",
        "_waiter",
        "complete",
        "delivered",
        "finished",
        "head_only",
        "keep_alive",
        "refusal",
        "scope",
        "started",
        "too_large",
    )  # fmt: skip

    def __init__(self, conn: ExchangeConnection, scope: Scope, keep_alive: bool, expect_continue: bool) -> None:
        self._conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.head_only = scope["method"] == "HEAD"
        self._continue = expect_continue  # "100 Continue" still to send when the app first asks for the body
        self._body: list[bytes] = []
        self._body_size = 0
        self._waiter: asyncio.Future[None] | None = None
        self.complete = False  # the whole request body has arrived
        self.delivered = False  # the app has taken the whole body
        self.too_large = False
        self.refusal: tuple[int, str] | None = None  # answered with this error by the server, not the app
        self.started = False  # the app sent http.response.start
        self.finished = False  # the whole answer is written
        self._status = 0
        self._head: list[tuple[bytes, bytes]] = []
        self._chunked = False  # the head is sent, and the body goes chunked
        # Chunked framing is HTTP/1.1's: an HTTP/1.0 client gets a streamed body unframed, ended by closing.
        self._framed = scope.get("http_version") != "1.0"

    # request body, as it arrives
    def add_body(self, data: bytes, limit: int) -> None:
        self._body_size += len(data)
        if self._body_size > limit:
            self.too_large = True
            self._body.clear()
        elif not self.too_large:
            self._body.append(data)
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ASGI
    async def receive(self) -> Message:
        conn = self._conn
        while True:
            if conn.gone or self.finished:
                return _DISCONNECT
            if self.too_large:
                limit = conn.limits.max_body_bytes
                conn.answer_error(self, 413, f"Request body over {limit} bytes.")
                return _DISCONNECT
            if not self.delivered and (self.complete or self._body):
                body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
                self._body.clear()
                self.delivered = self.complete
                return {"type": "http.request", "body": body, "more_body": not self.complete}
            if self._continue and not self.delivered:
                self._continue = False
                conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self._waiter = conn.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def send(self, message: Message) -> None:
        if self.finished or self._conn.gone:
            return
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            headers = list(message.get("headers", ()))
            for name, value in headers:
                if _INVALID_HEADER.search(name) or _INVALID_HEADER.search(value):
                    raise RuntimeError("invalid character in a response header")
            self.started = True
            self._status = message["status"]
            self._head = headers
            return
        if kind != "http.response.body" or not self.started:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        body: bytes = message.get("body", b"")
        if message.get("more_body", False):
            if body:
                self.write(body)
            await self._conn.drain()
            return
        if not self._chunked:  # the whole answer in one message: sent with its length
            self._conn.write(self._response_head(len(body)) + (b"" if self.head_only else body))
        elif self._framed and not self.head_only:
            self._conn.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n")
        elif body and not self.head_only:
            self._conn.write(body)
        self._conn.finish(self)

    # DirectBody
    def write(self, data: bytes) -> None:
        """Write body bytes now, from any callback; after http.response.start, before the last body message."""
        conn = self._conn
        if conn.gone or self.finished or not data:  # an empty chunk would end the body
            return
        if self._chunked:
            transport = conn.transport  # straight to it, not through conn.write: this runs for every chunk
            if transport is not None and not self.head_only:
                transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self._framed else data)
            return
        self._chunked = True
        head = self._response_head(None)
        if self.head_only:
            conn.write(head)
        else:
            conn.write(head + (b"%x\r\n%b\r\n" % (len(data), data) if self._framed else data))

    def watch_pressure(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """Call `pause` while the client does not keep up with what is written to it, `resume` when it does."""
        self._conn.pressure = (pause, resume)
        if self._conn.writing_paused:
            pause()

    @property
    def status(self) -> int:
        """The answer's status; 0 before http.response.start."""
        return self._status

    @property
    def closed(self) -> bool:
        return self._conn.gone or self.finished

    def _response_head(self, length: int | None) -> bytes:
        headers = self._head
        lines = [b"HTTP/1.1 %d %b\r\n" % (self._status, PHRASES.get(self._status, b"")), DateHeader.header()]
        for name, value in headers:
            if name.lower() == b"content-length":
                continue  # the server frames the body
            lines.append(b"%b: %b\r\n" % (name, value))
        if length is not None:
            lines.append(b"content-length: %d\r\n" % length)
        elif self._framed:
            lines.append(b"transfer-encoding: chunked\r\n")
        else:
            self.keep_alive = False  # HTTP/1.0 without a length: the end of the body is the end of the connection
        if not self.keep_alive or not self.complete or self._conn.closing:
            self.keep_alive = False
            lines.append(b"connection: close\r\n")
        elif self.scope["http_version"] == "1.0":
            lines.append(b"connection: keep-alive\r\n")
        lines.append(b"\r\n")
        self._head = []
        return b"".join(lines)
