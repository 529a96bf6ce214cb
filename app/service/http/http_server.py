"""A small HTTP/1.1 server for the OpenAI endpoint, with a direct path for streamed bodies.

Each request is handed to an ASGI app as usual, but the app may also write body bytes straight to the client
(`DirectBody`, under scope["extensions"][DIRECT_BODY]) from any callback: the gateway relays an engine's stream
from the upstream connection's own callback, with no task switch and no message dict per chunk (docs/ARCHITECTURE.md,
"The proxy stack"). httptools parses the requests.

The server answers by itself, and closes the connection, whatever HTTP it will not serve: malformed requests
(400), request lines or headers over the limits (414, 431), bodies over the limit (413), clients too slow to send
their request (408). A failure in the app never reaches the client as more than a 500 with a plain message.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import re
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import formatdate
from typing import cast
from urllib.parse import unquote

import httptools

from app.service.http.asgi import DIRECT_BODY, Message, Scope
from app.service.http.connection_cap import NoRoom, busy_answer, make_room

log = logging.getLogger("modeldeck.http")

App = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]
ErrorBody = Callable[[int, str], bytes]  # the JSON body of an error the server answers by itself
_INVALID_HEADER = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # CR, LF and other controls: no header injection
_DISCONNECT: Message = {"type": "http.disconnect"}
_LINGER_S = 2.0


@dataclass(frozen=True)
class HttpLimits:
    max_url_bytes: int = 8 * 1024
    max_header_bytes: int = 32 * 1024  # all header lines together
    max_headers: int = 100
    max_body_bytes: int = 4 * 1024 * 1024
    header_timeout_s: float = 10.0  # from a request's first byte (or the connection) to the end of its headers
    body_timeout_s: float = 30.0  # from the end of the headers to the end of the body
    keep_alive_s: float = 30.0  # an idle connection between requests
    max_pipelined: int = 16  # requests read ahead of the one being answered; more close the connection
    max_connections: int = 1024  # open at once; at the cap the longest idle one makes room (connection_cap.py)
    shutdown_grace_s: float = 2.0


class _Reject(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


_PHRASES = {status.value: status.phrase.encode() for status in http.HTTPStatus}


class _Date:
    """The Date header, formatted once a second."""

    second = 0
    value = b""

    @classmethod
    def header(cls) -> bytes:
        now = int(time.time())
        if now != cls.second:
            cls.second, cls.value = now, b"date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        return cls.value


class _Exchange:
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
        "scope",
        "started",
        "too_large",
    )  # fmt: skip

    def __init__(self, conn: _Connection, scope: Scope, keep_alive: bool, expect_continue: bool) -> None:
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
            transport = conn._transport  # straight to it, not through conn.write: this runs for every chunk
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
    def closed(self) -> bool:
        return self._conn.gone or self.finished

    def _response_head(self, length: int | None) -> bytes:
        headers = self._head
        lines = [b"HTTP/1.1 %d %b\r\n" % (self._status, _PHRASES.get(self._status, b"")), _Date.header()]
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


class _Connection(asyncio.Protocol):
    """One client connection: parses requests, answers them one at a time and in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self.gone = False
        self.closing = False  # close once the answer in progress is written
        self.writing_paused = False
        self.pressure: tuple[Callable[[], None], Callable[[], None]] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._reading = True
        self._active: _Exchange | None = None  # being answered
        self._parsing: _Exchange | None = None  # its headers are in, its body may still be arriving
        self._queue: deque[_Exchange] = deque()  # read ahead (pipelined), waiting for their turn
        self._in_head = False
        self._discarding = False  # an error was answered: what the client still sends is dropped
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._client: tuple[str, int] | None = None
        self._local: tuple[str, int] | None = None
        self.idle_since: float | None = None  # between requests (or before the first): may be closed at the cap

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        self._client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self._local = (str(local[0]), int(local[1])) if isinstance(local, tuple) else None
        self.idle_since = time.monotonic()
        if not self.server.admit(self):
            return
        self._arm(self.limits.header_timeout_s, self._too_slow)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.closing = True  # protocol upgrades are not offered: answer this request, then close
            self._pause_reading()
            return
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__  # what the callback raised
            if isinstance(cause, _Reject):
                self._refuse(cause.status, str(cause))
            else:
                log.error("HTTP request handling failed", exc_info=cause or exc)
                self._refuse(500, "Internal error.")
            return
        except httptools.HttpParserError:
            self._refuse(400, "Malformed HTTP request.")
            return
        if self._in_head:  # everything read so far is headers: bound them even before a line is complete
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes + self.limits.max_url_bytes:
                self._refuse(431, "Request headers too large.")

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self.server.connections.discard(self)
        if not self.server.connections:
            self.server.all_closed.set()
        self._disarm()
        for exchange in (self._active, self._parsing, *self._queue):
            if exchange is not None:
                exchange.wake()
        self._queue.clear()
        self._release_drain()
        self.pressure = None

    def pause_writing(self) -> None:
        self.writing_paused = True
        if self.pressure is not None:
            self.pressure[0]()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.pressure is not None:
            self.pressure[1]()
        self._release_drain()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._in_head = True
        self.idle_since = None
        self._url, self._headers, self._header_bytes = b"", [], 0
        if self._active is None and self._parsing is None:
            self._arm(self.limits.header_timeout_s, self._too_slow)

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self.limits.max_url_bytes:
            raise _Reject(414, "Request URL too long.")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        self._headers.append((name.lower(), value))
        if len(self._headers) > self.limits.max_headers or self._header_bytes > self.limits.max_header_bytes:
            raise _Reject(431, "Request headers too large.")

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self._parser
        try:
            parsed = httptools.parse_url(self._url)
        except httptools.HttpParserInvalidURLError:
            raise _Reject(400, "Malformed request URL.") from None
        raw_path = parsed.path or b"/"
        path = raw_path.decode("latin-1")
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": parser.get_http_version(),
            "method": parser.get_method().decode("ascii"),
            "scheme": self.server.scheme,
            "path": unquote(path) if "%" in path else path,
            "raw_path": raw_path,
            "query_string": parsed.query or b"",
            "root_path": "",
            "headers": self._headers,
            "client": self._client,
            "server": self._local,
        }
        expect = any(name == b"expect" and value.lower() == b"100-continue" for name, value in self._headers)
        exchange = _Exchange(self, scope, parser.should_keep_alive(), expect)
        scope["extensions"] = {DIRECT_BODY: exchange}
        length = next((value for name, value in self._headers if name == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > self.limits.max_body_bytes:
            exchange.too_large = True  # answered 413 when the app asks for it, without reading it
            self._pause_reading()
        self._parsing = exchange
        if self._active is None:
            self._start(exchange)
        elif len(self._queue) < self.limits.max_pipelined:
            self._queue.append(exchange)
            self._pause_reading()  # one request answered at a time: read no further ahead
        else:
            raise _Reject(503, "Too many pipelined requests.")

    def on_body(self, body: bytes) -> None:
        exchange = self._parsing
        if exchange is not None:
            exchange.add_body(body, self.limits.max_body_bytes)
            if exchange.too_large:
                self._pause_reading()

    def on_message_complete(self) -> None:
        exchange, self._parsing = self._parsing, None
        if exchange is not None:
            exchange.complete = True
            exchange.wake()
        if self._active is exchange:
            self._disarm()

    # answering
    def _start(self, exchange: _Exchange) -> None:
        self._active = exchange
        if exchange.complete:
            self._disarm()
        else:  # its body is still to come
            self._arm(self.limits.body_timeout_s, self._too_slow)
        task = self.loop.create_task(self._run(exchange))
        self.server.tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self.server.tasks.discard)

    async def _run(self, exchange: _Exchange) -> None:
        try:
            await self.server.app(exchange.scope, exchange.receive, exchange.send)
        except Exception:
            log.exception("the app failed on %s %s", exchange.scope["method"], exchange.scope["path"])
            if not exchange.started:
                self.answer_error(exchange, 500, "Internal error.")
        finally:
            if not exchange.finished:
                if exchange.started or self.gone:
                    self.close()  # an answer begun and not ended: the client must not take it as whole
                else:
                    self.answer_error(exchange, 500, "The server did not answer.")

    def answer_error(self, exchange: _Exchange, status: int, message: str) -> None:
        """Answer `exchange` with an error by the server itself, then close the connection."""
        if exchange.started or self.gone:
            self.close()
            return
        exchange.started = exchange.finished = True
        exchange.wake()
        body = self.server.error_body(status, message)
        head = (
            b"HTTP/1.1 %d %b\r\n%bcontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, _PHRASES.get(status, b""), _Date.header(), len(body))
        )
        self.write(head + (b"" if exchange.head_only else body))
        self._linger()

    def _linger(self) -> None:
        """Close after an error answer without losing it: closing with unread bytes from the client would reset
        the connection, and the client could lose the answer. So end our side, and read and drop what the client
        still sends for a moment."""
        self.closing = self._discarding = True
        transport = self._transport
        if transport is None or transport.is_closing() or not transport.can_write_eof():
            self.close()
            return
        transport.write_eof()
        self._resume_reading()
        self._arm(_LINGER_S, self.close)

    def finish(self, exchange: _Exchange) -> None:
        """The answer to `exchange` is written: go on with the next request, wait for one, or close."""
        exchange.finished = True
        exchange.wake()
        self.pressure = None
        if not exchange.keep_alive or not exchange.complete or self.closing or self.server.stopping:
            self.close()
            return
        self._active = None
        if self._queue:
            self._start(self._queue.popleft())
            if not self._queue:
                self._resume_reading()
        else:
            self._resume_reading()
            if self._in_head:  # the next request has begun
                self._arm(self.limits.header_timeout_s, self._too_slow)
            elif self._parsing is None:
                self.idle_since = time.monotonic()
                self._arm(self.limits.keep_alive_s, self.close)

    def _refuse(self, status: int, message: str) -> None:
        """A request the server will not serve: answer it if nothing else is being answered, and close."""
        self._pause_reading()
        active = self._active
        if active is None or active.finished:
            self.answer_error(_Exchange(self, {"method": "GET", "http_version": "1.1"}, False, False), status, message)
        elif active is self._parsing and not active.started:  # its own body is at fault
            self._parsing = None
            self.answer_error(active, status, message)
        else:
            self.closing = True  # the answer in progress ends, then the connection does

    def _too_slow(self) -> None:
        if self._parsing is None and not self._in_head:
            self.close()  # idle, or connected and silent
        else:
            self._refuse(408, "The request was not received in time.")

    # transport
    def write(self, data: bytes) -> None:
        if self._transport is not None and not self.gone:
            self._transport.write(data)

    async def drain(self) -> None:
        if self.writing_paused and not self.gone:
            if self._drain is None:
                self._drain = self.loop.create_future()
            await asyncio.shield(self._drain)

    def _release_drain(self) -> None:
        if self._drain is not None:
            if not self._drain.done():
                self._drain.set_result(None)
            self._drain = None

    def close(self) -> None:
        self._disarm()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def _pause_reading(self) -> None:
        if self._reading and self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
            self._reading = False

    def _resume_reading(self) -> None:
        if not self._reading and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
            self._reading = True

    def _arm(self, seconds: float, then: Callable[[], None]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(seconds, then)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def shut_down(self) -> None:
        """The server is stopping: close now if idle, else after the answer in progress."""
        self.closing = True
        if self._active is None or self._active.finished:
            self.close()


class HttpServer:
    """Serves `app` on a listening socket until `stop()`; answers in progress get `shutdown_grace_s` to end."""

    def __init__(
        self, app: App, error_body: ErrorBody, limits: HttpLimits | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.app = app
        self.error_body = error_body
        self.limits = limits or HttpLimits()
        self.tls = tls
        self.scheme = "https" if tls is not None else "http"
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()  # the app, one task per request being answered
        self.started = False
        self.stopping = False
        self._stop = asyncio.Event()
        self.all_closed = asyncio.Event()  # set when the last connection closes

    async def serve_socket(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        # A client that does not complete the TLS handshake (plain HTTP to this port, a scanner) is dropped within
        # the header timeout; asyncio logs a failed handshake only in debug mode.
        handshake = self.limits.header_timeout_s if self.tls is not None else None
        server = await loop.create_server(
            lambda: _Connection(self), sock=sock, backlog=2048, ssl=self.tls, ssl_handshake_timeout=handshake
        )
        self.started = True
        try:
            await self._stop.wait()
        finally:
            self.stopping = True
            server.close()
            for connection in list(self.connections):
                connection.shut_down()
            if self.connections:
                self.all_closed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.limits.shutdown_grace_s):
                        await self.all_closed.wait()
            for connection in list(self.connections):
                connection.close()
            await server.wait_closed()

    def admit(self, connection: _Connection) -> bool:
        """Count a new connection in; at the cap, close the longest idle one for it, or refuse it when none is."""
        try:
            evicted = make_room(self.connections, self.limits.max_connections, connection)
        except NoRoom:
            connection.idle_since = None
            connection.write(busy_answer(self.error_body(503, "Too many connections; try again shortly.")))
            connection.close()
            return False
        if evicted is not None:
            self.connections.discard(cast(_Connection, evicted))  # its descriptor is released as it closes
        self.connections.add(connection)
        return True

    def stop(self) -> None:
        self._stop.set()
