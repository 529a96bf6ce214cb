"""Idle connections cannot run the service out of file descriptors: the real service, with a hard limit of 200 open
files set before it starts, against hundreds of real sockets left open after a 401 (which keeps the connection)
and hundreds of silent ones on the control API."""

from __future__ import annotations

import contextlib
import http.client
import resource
import socket
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest

from app.paths import AppPaths
from app.service.http.connection_cap import RESERVED_FDS, ConnectionCaps, ConnectionTable, connection_caps
from tests.support.service import RunningService, start_service_process, stop_service_process

SOFT, HARD = 128, 200  # the service raises the soft limit to the hard one; caps come from the hard one
GATEWAY_CAP = 20


def low_open_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))


@pytest.fixture
def capped(paths: AppPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    tmp = tmp_path_factory.mktemp("capped")
    running = start_service_process(paths, tmp, "--max-connections", str(GATEWAY_CAP), preexec_fn=low_open_file_limit)
    yield running
    stop_service_process(running)


def port_of(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    assert port is not None
    return port


def established(pid: int, port: int) -> int:
    return sum(
        1
        for c in psutil.Process(pid).net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def get_models(port: int, key: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"})
        return connection.getresponse().status
    finally:
        connection.close()


@contextlib.contextmanager
def sockets(count: int, port: int, send: bytes = b"") -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=15)
            opened.append(sock)
            if send:
                sock.sendall(send)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def test_the_soft_open_file_limit_is_raised_to_the_hard_one(capped: RunningService) -> None:
    assert psutil.Process(capped.process.pid).rlimit(psutil.RLIMIT_NOFILE) == (HARD, HARD)


def test_idle_keep_alive_connections_are_evicted_and_the_endpoint_keeps_answering(capped: RunningService) -> None:
    port = port_of(capped.url)
    unauthorized = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer wrong\r\n\r\n"
    with contextlib.ExitStack() as opened:  # 300 connections, each kept after its 401
        for _ in range(300):
            sock = opened.enter_context(socket.create_connection(("127.0.0.1", port), timeout=15))
            sock.sendall(unauthorized)
            assert sock.recv(4096).startswith(b"HTTP/1.1 401"), "the 401 that keeps the connection"
        assert get_models(port, capped.api_key) == 200
        assert established(capped.process.pid, port) <= GATEWAY_CAP
    assert capped.client.models() is not None


STALLED = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: "  # headers begun and never finished


def test_connections_stalled_in_their_headers_cannot_lock_out_a_client_with_the_key(capped: RunningService) -> None:
    """Ten times the cap of half-sent requests, held open while a client with the key asks: it is answered 200
    (they used to fill the cap, and every client got 503 until the header timeout)."""
    port = port_of(capped.url)
    with sockets(10 * GATEWAY_CAP, port, send=STALLED):
        assert get_models(port, capped.api_key) == 200
        assert get_models(port, capped.api_key) == 200
        assert established(capped.process.pid, port) <= GATEWAY_CAP


def test_stalled_headers_cannot_lock_out_the_endpoint_on_uvicorn_either(
    paths: AppPaths, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same rules on the endpoint when it runs on uvicorn (--gateway-server uvicorn)."""
    tmp = tmp_path_factory.mktemp("capped-uvicorn")
    running = start_service_process(
        paths, tmp, "--max-connections", str(GATEWAY_CAP), "--gateway-server", "uvicorn", preexec_fn=low_open_file_limit
    )
    try:
        port = port_of(running.url)
        with sockets(10 * GATEWAY_CAP, port, send=STALLED):
            assert get_models(port, running.api_key) == 200
            assert established(running.process.pid, port) <= GATEWAY_CAP
    finally:
        stop_service_process(running)


def test_at_the_cap_with_every_connection_busy_a_newcomer_gets_503(capped: RunningService) -> None:
    """Connections whose request is in (its body still to come) are busy: none is closed, the newcomer is refused.
    Each asks for "100 Continue", which the gateway sends when it reads the body: then the request is surely in."""
    port = port_of(capped.url)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {capped.api_key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    with sockets(GATEWAY_CAP, port, send=head) as busy:
        for sock in busy:
            assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        with socket.create_connection(("127.0.0.1", port), timeout=15) as newcomer:
            answer = newcomer.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"Too many connections" in answer
        busy[0].sendall(b"{}")  # the oldest busy one was kept: it finishes its request
        assert busy[0].recv(4096).startswith(b"HTTP/1.1 400")
    assert get_models(port, capped.api_key) == 200


def test_silent_connections_to_the_control_api_cannot_exhaust_descriptors(capped: RunningService) -> None:
    port = port_of(capped.client.address.control_url)
    with sockets(300, port):
        models = capped.client.models()
        assert isinstance(models, list)
        assert get_models(port_of(capped.url), capped.api_key) == 200


def test_stalled_headers_on_the_control_api_cannot_lock_out_the_window(capped: RunningService) -> None:
    """The control API (uvicorn, its connection table as the endpoint's): 300 half-sent requests held open, and the
    window's client is still answered."""
    port = port_of(capped.client.address.control_url)
    with sockets(300, port, send=STALLED):
        assert isinstance(capped.client.models(), list)
        assert isinstance(capped.client.models(), list)


@dataclass(eq=False)
class Conn:
    client_host: str | None = "10.0.0.1"
    closed: bool = False

    def close(self) -> None:
        self.closed = True


def test_at_the_cap_a_connection_waiting_for_headers_goes_first_then_refused_idle_then_idle() -> None:
    table: ConnectionTable[Conn] = ConnectionTable(3, per_client=10)
    idle, refused, waiting = Conn(), Conn(), Conn()
    for connection in (idle, refused, waiting):
        assert table.admit(connection)
    table.busy(idle)
    table.idle(idle, refused=False)
    table.busy(refused)
    table.idle(refused, refused=True)
    order = []
    for _ in range(3):
        newcomer = Conn()
        assert table.admit(newcomer)
        order.append(next(c for c in (idle, refused, waiting) if c.closed and c not in order))
        table.busy(newcomer)
    assert order == [waiting, refused, idle] and len(table) == 3
    assert not table.admit(Conn())  # every connection busy: refused
    assert len(table) == 3


def test_one_client_keeps_at_most_its_share_of_connections_waiting_for_headers() -> None:
    table: ConnectionTable[Conn] = ConnectionTable(100, per_client=2)
    first, second, third = Conn("10.0.0.9"), Conn("10.0.0.9"), Conn("10.0.0.9")
    other = Conn("10.0.0.5")
    for connection in (first, other, second, third):
        assert table.admit(connection)
    assert first.closed and not second.closed and not third.closed and not other.closed  # its own oldest goes
    table.busy(second)  # headers in: no longer counts against the share
    assert table.admit(fourth := Conn("10.0.0.9"))
    assert not third.closed and not fourth.closed and len(table) == 4
    table.waiting(second)  # a second request begins on it
    assert third.closed


def test_caps_follow_the_open_file_limit() -> None:
    assert connection_caps(200) == ConnectionCaps(gateway=(200 - RESERVED_FDS) // 3, control=(200 - RESERVED_FDS) // 6)
    assert connection_caps(1 << 20) == ConnectionCaps(4096, 256)
    assert connection_caps(70) == ConnectionCaps(8, 8)  # never fewer than a handful
    assert connection_caps(None).gateway == 4096 and connection_caps(1 << 20, 50).gateway == 50
