"""The control API's server (uvicorn with app.service.http.uvicorn_cap) over real sockets: a client too slow with its
request is answered 408 and let go, as by ModelDeck's own server. The server runs in this process, in a thread with
its own event loop, with timeouts short enough to take a fraction of a second (the service's are 10 s and 30 s)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from app.service.http.asgi import BodyTooLarge, ClientGone, Receive, Scope, Send, read_body
from app.service.http.uvicorn_cap import capped_protocol
from tests.support.raw_http import read_all
from tests.support.waiting import wait_for

TIMEOUT_S = 0.5


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """The length of the body, once it has all arrived."""
    try:
        body = await read_body(receive, 1000)
    except (ClientGone, BodyTooLarge):
        return
    answer = json.dumps({"length": len(body)}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture
def port() -> Iterator[int]:
    config = uvicorn.Config(
        echo, http=capped_protocol(8, header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S), loop="none",
        lifespan="off", access_log=False, log_level="warning", timeout_graceful_shutdown=1,
    )  # fmt: skip
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(sockets=[sock]),), daemon=True)
    thread.start()
    wait_for(lambda: server.started, 5, "the server to listen", 0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(timeout=5)
    assert not thread.is_alive()
    sock.close()


def test_a_body_shorter_than_its_length_gets_408_and_the_connection_closes(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"a":')
        started = time.monotonic()
        data = read_all(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"connection: close" in head
    assert json.loads(body)["error"]["message"] == "The request was not received in time."
    assert time.monotonic() - started < 5


def test_headers_that_never_end_get_408(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
        assert read_all(sock).startswith(b"HTTP/1.1 408 ")


def test_a_request_on_time_is_answered_and_the_connection_kept(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for _ in range(2):
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
            answer = b""
            while not answer.endswith(b'{"length": 3}'):
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 "), answer
