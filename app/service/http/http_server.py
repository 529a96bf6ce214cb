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
import logging
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from typing import cast
from urllib.parse import unquote

import httptools

from app.service.http.asgi import DIRECT_BODY, Message, Scope
from app.service.http.connection_cap import ConnectionTable, busy_answer
from app.service.http.exchange import PHRASES, DateHeader, Exchange
from app.service.http.limits import HttpLimits

log = logging.getLogger("modeldeck.http")

App = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]
ErrorBody = Callable[[int, str], bytes]  # the JSON body of an error the server answers by itself
_LINGER_S = 2.0


class _Reject(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _StopParsing(Exception):
    """Raised in a parser callback to read no further: what the client sends after it is dropped."""


class _Connection(asyncio.Protocol):
    """One client connection: parses requests, answers them one at a time and in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.client_host: str | None = None
        self.gone = False
        self.closing = False  # close once the answer in progress is written
        self.writing_paused = False
        self.pressure: tuple[Callable[[], None], Callable[[], None]] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._reading = True
        self._active: Exchange | None = None  # being answered
        self._parsing: Exchange | None = None  # its headers are in, its body may still be arriving
        self._queue: deque[Exchange] = deque()  # read ahead (pipelined), waiting for their turn
        self._in_head = False
        self._discarding = False  # an error was answered: what the client still sends is dropped
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._client: tuple[str, int] | None = None
        self._local: tuple[str, int] | None = None
        self._idle = False  # between two requests; the first one's header deadline runs from the connection

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        self._client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self._local = (str(local[0]), int(local[1])) if isinstance(local, tuple) else None
        self.client_host = self._client[0] if self._client is not None else None
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
            elif not isinstance(cause, _StopParsing):
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
        self.server.table.discard(self)
        if not self.server.table:
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
        self._url, self._headers, self._header_bytes = b"", [], 0
        if self._idle:  # a request after an idle spell; else the deadline armed at the connection or the answer holds
            self._idle = False
            self.server.table.waiting(self)
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
        exchange = Exchange(self, scope, parser.should_keep_alive(), expect)
        scope["extensions"] = {DIRECT_BODY: exchange}
        length = next((value for name, value in self._headers if name == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > self.limits.max_body_bytes:
            exchange.too_large = True  # answered 413 when the app asks for it, without reading it
            self._pause_reading()
        self._parsing = exchange
        if self._active is None:
            self.server.table.busy(self)
            self._start(exchange)
            return
        self._queue.append(exchange)
        self._pause_reading()  # one request answered at a time: read no further ahead
        if len(self._queue) > self.limits.max_pipelined:
            # The requests read before it are answered in order, then this one's 503, then the connection closes.
            exchange.refusal = (503, "Too many pipelined requests.")
            self._discarding = True
            raise _StopParsing

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
    def _start(self, exchange: Exchange) -> None:
        self._active = exchange
        if exchange.refusal is not None:
            self.answer_error(exchange, *exchange.refusal)
            return
        if exchange.complete:
            self._disarm()
        else:  # its body is still to come
            self._arm(self.limits.body_timeout_s, self._too_slow)
        task = self.loop.create_task(self._run(exchange))
        self.server.tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self.server.tasks.discard)

    async def _run(self, exchange: Exchange) -> None:
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

    def answer_error(self, exchange: Exchange, status: int, message: str) -> None:
        """Answer `exchange` with an error by the server itself, then close the connection."""
        if exchange.started or self.gone:
            self.close()
            return
        exchange.started = exchange.finished = True
        exchange.wake()
        body = self.server.error_body(status, message)
        retry = b"retry-after: 1\r\n" if status == 503 else b""
        head = (
            b"HTTP/1.1 %d %b\r\n%b%bcontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, PHRASES.get(status, b""), DateHeader.header(), retry, len(body))
        )
        self.write(head + (b"" if exchange.head_only else body))
        self._linger()

    def _linger(self) -> None:
        """Close after an error answer without losing it: closing with unread bytes from the client would reset
        the connection, and the client could lose the answer. So end our side, and read and drop what the client
        still sends for a moment."""
        self.closing = self._discarding = True
        transport = self.transport
        if transport is None or transport.is_closing() or not transport.can_write_eof():
            self.close()
            return
        transport.write_eof()
        self._resume_reading()
        self._arm(_LINGER_S, self.close)

    def finish(self, exchange: Exchange) -> None:
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
                self.server.table.waiting(self)
                self._arm(self.limits.header_timeout_s, self._too_slow)
            elif self._parsing is None:
                self._idle = True
                self.server.table.idle(self, refused=exchange.status in (401, 403))
                self._arm(self.limits.keep_alive_s, self.close)

    def _refuse(self, status: int, message: str) -> None:
        """A request the server will not serve: answer it if nothing else is being answered, and close."""
        self._pause_reading()
        active = self._active
        if active is None or active.finished:
            self.answer_error(Exchange(self, {"method": "GET", "http_version": "1.1"}, False, False), status, message)
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
        if self.transport is not None and not self.gone:
            self.transport.write(data)

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
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _pause_reading(self) -> None:
        if self._reading and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
            self._reading = False

    def _resume_reading(self) -> None:
        if not self._reading and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
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
        self.table: ConnectionTable[_Connection] = ConnectionTable(self.limits.max_connections)
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
            for connection in self.table:
                connection.shut_down()
            if self.table:
                self.all_closed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.limits.shutdown_grace_s):
                        await self.all_closed.wait()
            for connection in self.table:
                connection.close()
            await server.wait_closed()

    def admit(self, connection: _Connection) -> bool:
        """Count a new connection in (at the cap another makes room: ConnectionTable), or refuse it with a 503."""
        if self.table.admit(connection):
            return True
        connection.write(busy_answer(self.error_body(503, "Too many connections; try again shortly.")))
        connection.close()
        return False

    def stop(self) -> None:
        self._stop.set()
