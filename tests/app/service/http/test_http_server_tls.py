"""The gateway's own HTTP server (app.service.http.http_server) serving TLS, over real sockets, with a certificate made
by app.service.http.tls: requests and streamed bodies over TLS, the server's own error answers still delivered, and
clients that never complete a handshake (plain HTTP, silence) dropped without an error logged."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.service.http.asgi import DIRECT_BODY, BodyTooLarge, ClientGone, Receive, Scope, Send, read_body
from app.service.http.http_server import HttpServer
from app.service.http.limits import HttpLimits
from app.service.http.tls import TlsIdentity, own_certificate
from tests.support.raw_http import read_all
from tests.support.waiting import wait_for

LIMITS = HttpLimits(max_body_bytes=1000, header_timeout_s=0.5, body_timeout_s=0.5, shutdown_grace_s=0.5)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    headers = [(b"content-type", b"application/json")]
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for piece in (b"one ", b"two ", b"three"):
            scope["extensions"][DIRECT_BODY].write(piece)
        await send({"type": "http.response.body", "body": b"!"})
        return
    try:
        body = await read_body(receive, LIMITS.max_body_bytes)
    except (ClientGone, BodyTooLarge):
        return
    answer = {"scheme": scope["scheme"], "length": len(body)}
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(answer).encode()})


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "status": status}}).encode()


@dataclass
class Running:
    port: int
    identity: TlsIdentity

    def client(self) -> ssl.SSLSocket:
        context = ssl.create_default_context(cafile=str(self.identity.cert_path))
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return context.wrap_socket(raw, server_hostname="127.0.0.1")


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[Running]:
    identity = own_certificate(tmp_path / "tls", ["127.0.0.1"])
    loop = asyncio.new_event_loop()
    http_server = HttpServer(app, error_body, LIMITS, identity.server_context())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    thread = threading.Thread(target=loop.run_until_complete, args=(http_server.serve_socket(sock),), daemon=True)
    thread.start()
    wait_for(lambda: http_server.started, 5, "the server to listen", 0.01)
    yield Running(sock.getsockname()[1], identity)
    loop.call_soon_threadsafe(http_server.stop)
    thread.join(timeout=5)
    assert not thread.is_alive()
    loop.close()


def test_requests_and_streams_over_tls(tls_server: Running) -> None:
    with tls_server.client() as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = read_all(sock)
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    first = json.loads(rest[: rest.index(b"}") + 1])
    assert first == {"scheme": "https", "length": 5}
    assert b"transfer-encoding: chunked" in rest and b"4\r\none \r\n" in rest and rest.endswith(b"0\r\n\r\n")


def test_the_servers_own_error_answer_arrives_over_tls(tls_server: Running) -> None:
    with tls_server.client() as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000)
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413") and b"over 1000 bytes" in answer


def test_plain_http_and_silence_are_dropped_without_an_error(
    tls_server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as plain:
        plain.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_all(plain) == b"", "nothing goes back in clear"
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as silent:
        assert read_all(silent) == b""  # the handshake timeout, not the client's own
    assert time.monotonic() - started < 9
    with tls_server.client() as sock:  # still serving
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_all(sock).startswith(b"HTTP/1.1 200")
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING], caplog.text
