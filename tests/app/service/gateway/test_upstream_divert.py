"""The engine client's callback path (`Response.divert`), against a tiny real HTTP server in this process that
streams a chunked answer: a stand-in for an engine, which cannot be made to send exactly these bursts on demand."""

from __future__ import annotations

import asyncio

from app.service.gateway.upstream import UpstreamPool
from app.service.gateway.upstream_endpoint import Endpoint
from tests.support.waiting import wait_until

PIECES = 200


async def _engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each POST with PIECES events, each its own chunk, in two bursts; keeps the connection."""
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"Content-Length")
            )
            await reader.readexactly(length)
            framed = [b"%x\r\n%b\r\n" % (len(e), e) for e in (b"data: %d\n\n" % n for n in range(PIECES))]
            # A burst (more pieces than are kept before the connection is paused), then the rest a moment later.
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"".join(framed[: PIECES // 2]))
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"".join(framed[PIECES // 2 :]) + b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass  # the client closed the connection
    finally:
        writer.close()


def test_pieces_kept_before_diverting_are_relayed_and_reading_resumes() -> None:
    relayed: list[bytes] = []
    seen: list[bytes] = []

    def relay(chunk: bytes) -> bool:
        relayed.append(chunk)
        return True

    def decline_the_end(chunk: bytes) -> bool:
        if chunk.endswith(b"data: %d\n\n" % (PIECES - 1)):
            return False
        seen.append(chunk)
        return True

    async def run() -> tuple[bytes, bytes]:
        server = await asyncio.start_server(_engine, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = UpstreamPool()
        try:
            endpoint = Endpoint.post(f"http://127.0.0.1:{port}/v1/completions", "")
            response = await pool.post(endpoint, b"{}")
            # The burst arrives and waits, more pieces than are kept before the connection is paused.
            await wait_until(lambda: response._connection.paused, "the unread burst pauses the connection")
            response.divert(relay)
            rest = await asyncio.wait_for(response.read(), 5)  # hangs if the paused connection is not resumed
            response.release()
            second = await pool.post(endpoint, b"{}")  # the same connection serves the next request
            second.divert(decline_the_end)
            last = await asyncio.wait_for(second.read(), 5)
            second.release()
            return rest, last
        finally:
            pool.close()
            server.close()
            await server.wait_closed()

    rest, last = asyncio.run(run())
    expected = b"".join(b"data: %d\n\n" % n for n in range(PIECES))
    assert b"".join(relayed) == expected and rest == b""
    # the second answer went to the sink until it declined a read, which read() then returned
    assert last.endswith(b"data: %d\n\n" % (PIECES - 1)) and b"".join(seen) + last == expected
