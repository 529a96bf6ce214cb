"""Answers from servers ModelDeck did not start (`--remote`, `--upstream`) are bounded in size and time, against a
tiny real HTTP server in this process that misbehaves on demand, as a hostile or broken remote would: an endless
body, endless headers, a stall, a trickle that never ends. A stand-in, because no real engine can be made to."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from app.service.gateway.upstream_endpoint import AnswerLimits, UpstreamError
from app.service.remotes import MAX_LIST_BYTES, RemoteUnavailable, list_models
from tests.support.raw_upstream import Behaviour, fetch

LIMITS = AnswerLimits(max_head_bytes=4096, max_bytes=1 << 20, idle_s=1.0, total_s=3.0)


async def _endless_body(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    piece = b"%x\r\n%b\r\n" % (65536, b"x" * 65536)
    while True:
        writer.write(piece)
        await writer.drain()


async def _endless_headers(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\n")
    while True:
        writer.write(b"x-filler: " + b"y" * 1000 + b"\r\n")
        await writer.drain()


async def _silent(writer: asyncio.StreamWriter) -> None:
    await asyncio.Event().wait()  # says nothing, holds the connection


async def _trickle(writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    while True:  # a byte of event every fraction of the idle limit, forever
        writer.write(b"1\r\n:\r\n")
        await writer.drain()
        await asyncio.sleep(LIMITS.idle_s / 4)


async def _answer(writer: asyncio.StreamWriter) -> None:
    body = b'{"ok": true}'
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body))
    await writer.drain()


@pytest.mark.parametrize(
    ("behaviour", "problem"),
    [
        (_endless_body, "the answer is over the limit of 1048576 bytes"),
        (_endless_headers, "the answer's headers are over the limit of 4096 bytes"),
        (_silent, "nothing arrived for 1 s"),
        (_trickle, "the answer took longer than 3 s"),
    ],
)
def test_a_remote_answer_over_its_limits_fails_with_the_reason(behaviour: Behaviour, problem: str) -> None:
    with pytest.raises(UpstreamError, match=problem):
        asyncio.run(asyncio.wait_for(fetch(behaviour, LIMITS), 60))


def test_an_answer_within_the_limits_is_read_and_loopback_engines_have_none() -> None:
    assert asyncio.run(fetch(_answer, LIMITS)) == b'{"ok": true}'
    assert asyncio.run(fetch(_answer, None)) == b'{"ok": true}'


def _models_answer(body: bytes) -> Behaviour:
    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()

    return answer


async def _list(behaviour: Behaviour) -> tuple[str, ...]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")  # a GET: no body
            await behaviour(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession() as session:
            return await list_models(session, f"http://127.0.0.1:{port}", None)
    finally:
        server.close()


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b" " * (MAX_LIST_BYTES + 10), f"answered more than {MAX_LIST_BYTES} bytes"),
        (json.dumps({"data": [{"id": str(n)} for n in range(1001)]}).encode(), "lists 1001 models, more than 1000"),
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 levels deep"),
    ],
)
def test_a_remotes_model_list_is_bounded(body: bytes, problem: str) -> None:
    with pytest.raises(RemoteUnavailable, match=problem):
        asyncio.run(_list(_models_answer(body)))


def test_a_remotes_model_list_within_bounds_is_read() -> None:
    body = json.dumps({"object": "list", "data": [{"id": "a"}, {"id": "b"}, {"id": "a"}]}).encode()
    assert asyncio.run(_list(_models_answer(body))) == ("a", "b")
