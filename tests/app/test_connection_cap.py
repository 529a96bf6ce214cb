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

import psutil
import pytest

from app.paths import AppPaths
from app.service.http.connection_cap import RESERVED_FDS, ConnectionCaps, NoRoom, connection_caps, make_room
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
    with sockets(300, port) as opened:
        for sock in opened[-GATEWAY_CAP:]:
            sock.sendall(unauthorized)
            assert sock.recv(4096).startswith(b"HTTP/1.1 401"), "the 401 that keeps the connection"
        for sock in opened[:-GATEWAY_CAP]:
            sock.sendall(unauthorized)  # answered, or already closed for a newer one: either is fine
        assert get_models(port, capped.api_key) == 200
        assert established(capped.process.pid, port) <= GATEWAY_CAP
    assert capped.client.models() is not None


def test_at_the_cap_with_every_connection_busy_a_newcomer_gets_503(capped: RunningService) -> None:
    """Connections in the middle of sending a request are not idle: none is closed, the newcomer is refused."""
    port = port_of(capped.url)
    with sockets(GATEWAY_CAP, port, send=b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n") as busy:
        with socket.create_connection(("127.0.0.1", port), timeout=15) as newcomer:
            answer = newcomer.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"Too many connections" in answer
        busy[0].sendall(b"\r\n")  # the oldest busy one was kept: it finishes its request
        assert busy[0].recv(4096).startswith(b"HTTP/1.1 401")
    assert get_models(port, capped.api_key) == 200


def test_silent_connections_to_the_control_api_cannot_exhaust_descriptors(capped: RunningService) -> None:
    port = port_of(capped.client.address.control_url)
    with sockets(300, port):
        models = capped.client.models()
        assert isinstance(models, list)
        assert get_models(port_of(capped.url), capped.api_key) == 200


class Conn:
    def __init__(self, idle_since: float | None) -> None:
        self.idle_since = idle_since
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_the_longest_idle_connection_makes_room_and_busy_ones_never_do() -> None:
    busy, recent, oldest = Conn(None), Conn(20.0), Conn(10.0)
    newcomer = Conn(30.0)
    assert make_room({busy, recent}, 3, newcomer) is None  # room left
    assert make_room({busy, recent, oldest, newcomer}, 3, newcomer) is oldest
    assert oldest.closed and not recent.closed and not busy.closed and oldest.idle_since is None
    with pytest.raises(NoRoom):
        make_room({busy, Conn(None), Conn(None)}, 3, newcomer)


def test_caps_follow_the_open_file_limit() -> None:
    assert connection_caps(200) == ConnectionCaps(gateway=(200 - RESERVED_FDS) // 3, control=(200 - RESERVED_FDS) // 6)
    assert connection_caps(1 << 20) == ConnectionCaps(4096, 256)
    assert connection_caps(70) == ConnectionCaps(8, 8)  # never fewer than a handful
    assert connection_caps(None).gateway == 4096 and connection_caps(1 << 20, 50).gateway == 50
