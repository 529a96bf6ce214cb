"""A tiny asyncio HTTP server in the test's process that answers each request as the test's `Behaviour` writes it
(a hostile or broken server ModelDeck did not start), asked through the gateway's own UpstreamPool."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from app.service.gateway.upstream import UpstreamPool
from app.service.gateway.upstream_endpoint import AnswerLimits, Endpoint

Behaviour = Callable[[asyncio.StreamWriter], Awaitable[None]]  # writes the answer to a request it has read


def serve(behaviour: Behaviour) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A connection handler for asyncio.start_server: it reads each request (head and Content-Length body), then
    `behaviour` answers it."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))  # fmt: skip
                await reader.readexactly(length)
                await behaviour(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        finally:
            writer.close()

    return handle


async def fetch(behaviour: Behaviour, limits: AnswerLimits | None) -> bytes:
    """The body of the answer `behaviour` gives to one POST through an UpstreamPool with `limits`."""
    server = await asyncio.start_server(serve(behaviour), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = UpstreamPool()
    try:
        endpoint = Endpoint.post(f"http://127.0.0.1:{port}/v1/chat/completions", "", limits)
        response = await pool.post(endpoint, b"{}")
        try:
            return await response.read()
        finally:
            response.release()
    finally:
        pool.close()
        server.close()
