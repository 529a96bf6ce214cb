"""A small HTTP/1.1 client for the engines behind the gateway: keep-alive connections, answers streamed as read.

Why not aiohttp or httpx: setting up one request in either costs more CPU than the rest of the gateway's work
on it (docs/ARCHITECTURE.md, "The proxy stack"). The servers behind the gateway
are ones ModelDeck starts on loopback, or OpenAI-style servers the user named on this machine, so this needs
only POST with a body, answers with Content-Length, chunked or ended by closing (HTTP/1.0), and keep-alive.
httptools (already under uvicorn) parses the answers.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import cast

import httptools

from app.service.gateway.upstream_endpoint import AnswerLimits, Endpoint, Unreachable, UpstreamError

CONNECT_TIMEOUT_S = 10.0
_DRAIN_S = 2.0  # how long the end of an answer nobody reads is awaited, to keep its connection
_PAUSE_AFTER = 64  # body pieces buffered for a reader that does not keep up before the engine is paused


class Response:
    """An answer being read. `status` and `headers` are set when it is returned; the body is read with
    `read_chunk` (what arrived since the last call) or `read` (all of it)."""

    __slots__ = (
        "_abandoned", "_chunks", "_connection", "_done", "_error", "_pending", "_sink", "_waiter", "headers",
        "status",
    )  # fmt: skip

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []  # names in lower case
        self._chunks: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._error: UpstreamError | None = None
        self._abandoned = False
        self._sink: Callable[[bytes], bool] | None = None
        self._pending: list[bytes] = []  # body pieces of the current read, for the sink

    def divert(self, sink: Callable[[bytes], bool]) -> None:
        """Hand body pieces to `sink` in the connection's own callback as they arrive, instead of keeping them for
        `read_chunk`: no task wakes up per piece. The pieces of one read go together, in one call, as do the
        pieces already kept. A chunk `sink` declines (returns False) is kept, and so is every later one.
        `read_chunk` still raises the connection's errors and returns b"" once the body is complete."""
        self._sink = sink
        self._pending, self._chunks = self._chunks, []
        self._flush()
        if self._connection.paused:  # paused while the pieces waited for the reader: they are gone now
            self._connection.resume()

    def pause(self) -> None:
        """Stop reading from the engine (its sends then block): the client does not keep up."""
        if not self._connection.paused:
            self._connection.pause()

    def resume(self) -> None:
        if self._connection.paused:
            self._connection.resume()

    async def read_chunk(self) -> bytes:
        """The body bytes received since the last call, waiting for some; b"" once the body is complete."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._done:
                return b""
            await self._wait()
        chunks, self._chunks = self._chunks, []
        if self._connection.paused:
            self._connection.resume()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def has_body(self) -> bool:
        """Wait for the first body bytes, leaving them to `read_chunk` or `divert`; False when the body is empty."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._done:
                return False
            await self._wait()
        return True

    @property
    def complete(self) -> bool:
        """The whole body has arrived (and may still wait to be read)."""
        return self._done

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.read_chunk():
            parts.append(chunk)
        return b"".join(parts)

    def release(self, answered: bool = False) -> None:
        """Give the connection back: to the pool if the answer was read in full, else closed, which tells the
        engine to stop working on the request. `answered`: the caller needs no more of it (a client that
        leaves right after `data: [DONE]`); the rest is then awaited briefly to keep the connection."""
        self._sink = None
        if self._done or self._error is not None or not answered:
            self._connection.finish(self._done and self._error is None)
        else:
            self._abandoned = True
            self._connection.drain()

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _push(self, data: bytes) -> None:
        if self._sink is not None:
            self._pending.append(data)
            return
        if self._abandoned:
            return
        self._chunks.append(data)
        if len(self._chunks) > _PAUSE_AFTER and not self._connection.paused:
            self._connection.pause()

    def _flush(self) -> None:
        """Hand the pieces of the last read to the sink."""
        pending, self._pending = self._pending, []
        if not pending or self._sink is None:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        if not self._sink(data):
            self._sink = None
            self._chunks.append(data)
            self._wake()

    def _complete(self) -> None:
        self._done = True
        self._wake()
        if self._abandoned:
            self._connection.finish(True)

    def _fail(self, error: UpstreamError) -> None:
        if not self._done:
            self._error = error
            self._wake()


class _Connection(asyncio.Protocol):
    """One keep-alive connection; httptools calls the `on_*` methods as it parses."""

    def __init__(self, idle: deque[_Connection]) -> None:
        self._idle = idle  # where this connection waits between requests
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()  # asked once: asking checks the process id (a syscall a chunk)
        self._parser = httptools.HttpResponseParser(self)
        self._response: Response | None = None
        self.closed = False
        self.paused = False
        self.received = False  # any byte of the current answer
        self._keep_alive = False  # the current answer leaves the connection open
        self._ends_at_close = False  # the current answer's body has no length or chunks: closing ends it
        self._limits: AnswerLimits | None = None  # of the current answer
        self._size = self._head_size = 0
        self._last_read = self._deadline = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self._overflow: str | None = None  # why a parser callback stopped the answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.received = True
        response = self._response  # the parser may finish the answer and let it go
        if self._limits is not None and not self._count(len(data)):
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._abort(UpstreamError(self._overflow or f"the engine's answer is not valid HTTP: {exc}"))
            return
        if response is not None:
            if response._pending:  # one write to the client for all the body pieces of this read
                response._flush()
            elif response._chunks:  # one wake-up for all of them
                response._wake()

    def eof_received(self) -> bool:
        # httptools cannot be told of the end of the stream (llhttp_finish), which is what ends such a body.
        response = self._response
        if self._ends_at_close and response is not None and response.status and not response.complete:
            self.on_message_complete()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._response is not None:
            self._response._fail(UpstreamError("the engine closed the connection"))

    def send(self, request: bytes, limits: AnswerLimits | None = None) -> Response:
        assert self._transport is not None
        self._response = Response(self)
        self.received = False
        self._limits = limits
        if limits is not None:
            now = self._loop.time()
            self._size = self._head_size = 0
            self._last_read, self._deadline, self._overflow = now, now + limits.total_s, None
            self._watch()
        self._transport.write(request)
        return self._response

    def _count(self, size: int) -> bool:
        """Note `size` more bytes of a limited answer; False (and the answer failed) past its size limit."""
        assert self._limits is not None
        self._size += size
        self._last_read = self._loop.time()
        if self._size > self._limits.max_bytes:
            self._abort(UpstreamError(f"the answer is over the limit of {self._limits.max_bytes} bytes"))
            return False
        return True

    def _watch(self) -> None:
        """Fail a limited answer that goes silent for `idle_s` (not counting while the client holds it back)
        or lasts past `total_s`; else look again when the next of those could be reached."""
        limits, self._watchdog = self._limits, None
        if limits is None or self._response is None or self.closed:
            return
        now = self._loop.time()
        if self.paused:
            self._last_read = now
        if now >= self._deadline:
            self._abort(UpstreamError(f"the answer took longer than {limits.total_s:g} s"))
        elif now - self._last_read >= limits.idle_s:
            self._abort(UpstreamError(f"nothing arrived for {limits.idle_s:g} s"))
        else:
            wake = min(self._last_read + limits.idle_s, self._deadline)
            self._watchdog = self._loop.call_at(wake, self._watch)

    def _unwatch(self) -> None:
        self._limits = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def answer(self) -> Response:
        """Wait for the head of the answer to the request just sent."""
        response = self._response
        assert response is not None
        while not response.status:
            if response._error is not None:
                raise response._error
            await response._wait()
        return response

    def finish(self, reusable: bool) -> None:
        self._response = None
        self._unwatch()
        if reusable and self._keep_alive and not self.closed and len(self._idle) < (self._idle.maxlen or 0):
            if self.paused:
                self.resume()
            self._idle.append(self)
        else:
            self.close()

    def drain(self) -> None:
        """Let the current answer end on its own, then rejoin the pool; close if it takes too long."""
        if self.paused:
            self.resume()
        asyncio.get_running_loop().call_later(_DRAIN_S, self._stop_draining, self._response)

    def _stop_draining(self, response: Response | None) -> None:
        if self._response is response:
            self.finish(False)

    def close(self) -> None:
        self.closed = True
        self._unwatch()
        if self._transport is not None:
            self._transport.close()

    def pause(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()
            self.paused = True

    def resume(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
        self.paused = False

    def _abort(self, error: UpstreamError) -> None:
        if self._response is not None:
            self._response._fail(error)
        self.close()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if self._limits is not None:
            self._head_size += len(name) + len(value) + 4
            if self._head_size > self._limits.max_head_bytes:
                self._overflow = f"the answer's headers are over the limit of {self._limits.max_head_bytes} bytes"
                raise UpstreamError(self._overflow)  # stops the parser: data_received fails the answer
        if self._response is not None:
            self._response.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        # Read here: once the message is complete, the parser has moved on to the next one.
        self._keep_alive = self._parser.should_keep_alive()
        if self._response is not None:
            framing = (b"content-length", b"transfer-encoding")
            self._ends_at_close = not any(name in framing for name, _ in self._response.headers)
            self._response.status = self._parser.get_status_code()
            self._response._wake()

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is not None:
            if response._sink is not None:  # a diverted stream, once per event: no further call
                response._pending.append(body)
            else:
                response._push(body)

    def on_message_complete(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._response is not None:
            self._response._complete()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The system's trust store, verifying the host name: made once, it costs milliseconds."""
    return ssl.create_default_context()


class UpstreamPool:
    """Keep-alive connections per server, most recently used first; taking one never scans the others."""

    def __init__(self, max_idle: int = 256) -> None:
        self._idle: dict[tuple[str, int, bool], deque[_Connection]] = {}
        self._max_idle = max_idle

    async def post(self, endpoint: Endpoint, body: bytes) -> Response:
        """Send a POST and wait for the head of the answer. Call `release()` on the answer when done with it."""
        request = endpoint.request(body)
        idle = self._idle.get((endpoint.host, endpoint.port, endpoint.tls))
        while idle:
            connection = idle.pop()
            if connection.closed:
                continue
            response = connection.send(request, endpoint.limits)
            try:
                return await connection.answer()
            except UpstreamError:
                connection.close()
                if connection.received:
                    raise
                # The server closed this idle connection as the request went out, so it never saw the
                # request: send it again on a fresh connection.
            except BaseException:
                response.release()
                raise
            break
        connection = await self._connect(endpoint)
        response = connection.send(request, endpoint.limits)
        try:
            return await connection.answer()
        except UpstreamError as exc:
            response.release()
            if connection.received:
                raise
            raise Unreachable(f"{exc} without answering") from exc
        except BaseException:
            response.release()
            raise

    async def _connect(self, endpoint: Endpoint) -> _Connection:
        idle = self._idle.setdefault((endpoint.host, endpoint.port, endpoint.tls), deque(maxlen=self._max_idle))
        loop = asyncio.get_running_loop()
        context = _tls_context() if endpoint.tls else None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                _, connection = await loop.create_connection(
                    lambda: _Connection(idle), endpoint.host, endpoint.port, ssl=context
                )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise Unreachable(f"cannot connect to the engine: {exc.__class__.__name__}") from exc
        return connection

    def close(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
