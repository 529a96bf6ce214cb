"""The floor of any Python proxy: a TCP relay that forwards bytes between a client and an engine, nothing else.

Run by hand from the repository root (pytest does not collect tests/bench); gateway_overhead.py starts it as
its `relay` target:

    .venv/bin/python tests/bench/byte_relay.py --port 9200 --upstream-port 9100

Each client connection gets its own connection to the engine on 127.0.0.1, opened when the client connects.
Bytes are written to the other side as they arrive, in the protocol callbacks of asyncio (uvloop when
installed): no HTTP parsing, no measurement, no buffering beyond the transports' own. When one side's write
buffer is full, the other side stops being read until it drains; when one side closes, the other is closed
after what it still has to send.

Any proxy that relays an engine's stream in Python pays at least this per chunk (a wake-up of the loop, a read,
a write), so its CPU per chunk bounds from below what any Python gateway, ModelDeck's included, can reach.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import cast

from synthetic_engine import parse_loopback_args, run, serve_until_signalled  # run as a script beside it


class _Side(asyncio.Protocol):
    """One end of a relayed connection: what it receives is written to its peer's transport."""

    def __init__(self, peer: _Side | None = None) -> None:
        self.peer = peer
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None and self.peer.transport is not None
        self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()  # after its buffered bytes are sent

    # Flow control: this side's write buffer is past its high-water mark, so stop reading what fills it.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _ClientSide(_Side):
    """The client's end: opens the engine's end when the client connects, holding what comes before it is open."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__()
        self.upstream_port = upstream_port
        self._early: list[bytes] = []
        self._connecting: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._connecting = asyncio.get_running_loop().create_task(self._connect())

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            # Not in connection_made: the loop may start reading only after it (uvloop does).
            assert self.transport is not None
            self._early.append(data)
            self.transport.pause_reading()
            return
        super().data_received(data)

    async def _connect(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(lambda: _Side(peer=self), "127.0.0.1", self.upstream_port)
        except OSError:
            self.transport.close()
            return
        if self.closed:  # the client left while the engine's end was opening
            assert upstream.transport is not None
            upstream.transport.close()
            return
        self.peer = upstream
        assert upstream.transport is not None
        upstream.transport.writelines(self._early)
        self._early.clear()
        self.transport.resume_reading()


async def serve(host: str, port: int, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    await serve_until_signalled(await loop.create_server(lambda: _ClientSide(upstream_port), host, port, backlog=1024))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream-port", type=int, required=True, help="the engine's port on 127.0.0.1")
    args = parse_loopback_args(parser, argv)
    return run(serve(args.host, args.port, args.upstream_port))


if __name__ == "__main__":
    raise SystemExit(main())
