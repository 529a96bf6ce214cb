"""The gateway's HTTP/1.1 server (app.service.http.http_server) at the HTTP level, over real sockets.

The server runs in this process, in a thread with its own event loop, around a small ASGI app written here for
the purpose (the gateway itself is tested through the real service in test_gateway.py): each route makes the
server show one behaviour. The limits are small so that timeouts take a fraction of a second.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from app.service.http.asgi import DIRECT_BODY, BodyTooLarge, ClientGone, Message, Receive, Scope, Send, read_body
from app.service.http.http_server import HttpServer
from app.service.http.limits import HttpLimits
from tests.support.raw_http import Answer, read_all, read_answer
from tests.support.waiting import wait_for

LIMITS = HttpLimits(
    max_url_bytes=256, max_header_bytes=1024, max_headers=12, max_body_bytes=1000, header_timeout_s=0.5,
    body_timeout_s=0.5, keep_alive_s=0.6, max_pipelined=4, shutdown_grace_s=0.5,
)  # fmt: skip
SECRET = "secret-internal-detail"


@dataclass
class Seen:
    disconnects: int = 0
    pauses: int = 0
    resumes: int = 0
    events: list[str] = field(default_factory=list)


def error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "status": status}}).encode()


def make_app(seen: Seen):  # type: ignore[no-untyped-def]
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        headers: list[tuple[bytes, bytes]] = [(b"content-type", b"application/json")]
        if path == "/echo":
            try:
                body = await read_body(receive, 1000)
            except (ClientGone, BodyTooLarge):
                return
            answer = {"method": scope["method"], "length": len(body), "query": scope["query_string"].decode()}
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": json.dumps(answer).encode()})
        elif path == "/stream":
            direct = scope["extensions"][DIRECT_BODY]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for piece in (b"one ", b"two ", b"three"):
                direct.write(piece)
            await send({"type": "http.response.body", "body": b"!"})
        elif path == "/flood":  # writes until the client stops reading, then waits for it to catch up
            direct = scope["extensions"][DIRECT_BODY]
            resumed = asyncio.Event()

            def pause() -> None:
                seen.pauses += 1

            def resume() -> None:
                seen.resumes += 1
                resumed.set()

            await send({"type": "http.response.start", "status": 200, "headers": headers})
            direct.watch_pressure(pause, resume)
            written = 0
            while not seen.pauses and written < 256 << 20:
                direct.write(b"x" * 65536)
                written += 65536
            await resumed.wait()
            await send({"type": "http.response.body", "body": b"end"})
        elif path == "/wait-disconnect":
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"started", "more_body": True})
            message: Message = await receive()
            while message["type"] != "http.disconnect":
                message = await receive()
            seen.disconnects += 1
        elif path == "/boom":
            raise RuntimeError(SECRET)
        elif path == "/half":
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"partial", "more_body": True})
            raise RuntimeError(SECRET)
        else:
            await send({"type": "http.response.start", "status": 404, "headers": headers})
            await send({"type": "http.response.body", "body": b'{"error": "unknown"}'})

    return app


@dataclass
class Running:
    port: int
    seen: Seen


@pytest.fixture
def server() -> Iterator[Running]:
    seen = Seen()
    loop = asyncio.new_event_loop()
    http_server = HttpServer(make_app(seen), error_body, LIMITS)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    thread = threading.Thread(target=loop.run_until_complete, args=(http_server.serve_socket(sock),), daemon=True)
    thread.start()
    wait_for(lambda: http_server.started, 5, "the server to listen", 0.01)
    yield Running(port, seen)
    loop.call_soon_threadsafe(http_server.stop)
    thread.join(timeout=5)
    assert not thread.is_alive()
    loop.close()


def connect(running: Running) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", running.port), timeout=5)
    return sock


def exchange(running: Running, request: bytes) -> tuple[Answer, bool]:
    """Send `request` on a fresh connection; its answer, and whether the server then closed the connection."""
    with connect(running) as sock:
        sock.sendall(request)
        buffer = bytearray()
        answer = read_answer(sock, buffer)
        sock.settimeout(0.3)  # less than the keep-alive time: a close now is the answer's
        try:
            closed = not buffer and sock.recv(1) == b""
        except TimeoutError:
            closed = False
        return answer, closed


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n".encode()


def assert_clean_error(answer: Answer, status: int) -> None:
    assert answer.status == status
    assert json.loads(answer.body)["error"]["message"]
    assert b"Traceback" not in answer.body and SECRET.encode() not in answer.body


def test_keep_alive_serves_requests_one_after_another(server: Running) -> None:
    with connect(server) as sock:
        buffer = bytearray()
        for query in ("a=1", "b=2"):
            sock.sendall(get(f"/echo?{query}"))
            answer = read_answer(sock, buffer)
            assert answer.status == 200 and json.loads(answer.body)["query"] == query
            assert b"date" in answer.headers and b"connection" not in answer.headers


def test_pipelined_requests_are_answered_in_order(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(b"".join(get(f"/echo?n={n}") for n in range(4)))
        buffer = bytearray()
        queries = [json.loads(read_answer(sock, buffer).body)["query"] for _ in range(4)]
    assert queries == [f"n={n}" for n in range(4)]


def test_past_the_pipelining_limit_the_requests_read_are_answered_then_a_503(server: Running) -> None:
    """The one being answered and max_pipelined read ahead get their answers in order, the next its 503 with
    Retry-After, then the connection closes (it used to close after the first answer, the rest never answered)."""
    with connect(server) as sock:
        sock.sendall(b"".join(get(f"/echo?n={n}") for n in range(12)))
        buffer = bytearray()
        answers = [read_answer(sock, buffer) for _ in range(LIMITS.max_pipelined + 2)]
        rest = bytes(buffer) + read_all(sock)
    served = answers[:-1]
    assert [json.loads(answer.body)["query"] for answer in served] == [f"n={n}" for n in range(len(served))]
    refused = answers[-1]
    assert_clean_error(refused, 503)
    assert refused.headers[b"retry-after"] == b"1" and b"pipelined" in refused.body
    assert rest == b""  # then the end of the connection, nothing more


def test_http10_without_keep_alive_is_answered_and_closed(server: Running) -> None:
    answer, closed = exchange(server, b"GET /echo HTTP/1.0\r\n\r\n")
    assert answer.status == 200 and closed
    with connect(server) as sock:  # a streamed answer to HTTP/1.0: not chunked, ended by closing
        sock.sendall(b"GET /stream HTTP/1.0\r\n\r\n")
        data = read_all(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"chunked" not in head and b"connection: close" in head.lower()
    assert body == b"one two three!"


def test_http10_with_keep_alive_stays_open(server: Running) -> None:
    answer, closed = exchange(server, b"GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert answer.status == 200 and answer.headers[b"connection"] == b"keep-alive" and not closed


def test_head_gets_the_head_only(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\n" + get("/echo"))
        buffer = bytearray()
        head = read_answer(sock, buffer, head_only=True)
        assert head.status == 200 and int(head.headers[b"content-length"]) > 0
        assert json.loads(read_answer(sock, buffer).body)["method"] == "GET"  # no stray body in between


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"FROBNICATE / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"this is not http\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ],
)
def test_malformed_requests_get_400_and_the_connection_closes(server: Running, request_bytes: bytes) -> None:
    answer, closed = exchange(server, request_bytes)
    assert_clean_error(answer, 400)
    assert closed


def test_an_unknown_route_method_reaches_the_app(server: Running) -> None:
    answer, closed = exchange(server, b"DELETE /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.status == 404 and not closed


def test_request_line_and_header_limits(server: Running) -> None:
    answer, closed = exchange(server, get("/echo?" + "a" * 300))
    assert_clean_error(answer, 414)
    assert closed
    answer, closed = exchange(server, get("/echo", "X-Big: " + "b" * 1100 + "\r\n"))
    assert_clean_error(answer, 431)
    assert closed
    answer, closed = exchange(server, get("/echo", "".join(f"X-{n}: v\r\n" for n in range(20))))
    assert_clean_error(answer, 431)
    assert closed


def test_an_endless_header_line_is_cut_off(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /echo HTTP/1.1\r\nX-Endless: ")
        for _ in range(100):
            sock.sendall(b"z" * 1024)
        assert_clean_error(read_answer(sock, bytearray()), 431)
        assert read_all(sock) == b""


def test_body_limit_with_content_length_is_answered_without_reading(server: Running) -> None:
    answer, closed = exchange(server, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
    assert_clean_error(answer, 413)
    assert closed


def test_chunked_bodies_count_against_the_limit(server: Running) -> None:
    small = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n" + b"a" * 256 + b"\r\n0\r\n\r\n"
    )
    answer, closed = exchange(server, small)
    assert answer.status == 200 and json.loads(answer.body)["length"] == 256 and not closed
    pieces = b"".join(b"200\r\n" + b"a" * 512 + b"\r\n" for _ in range(4))
    answer, closed = exchange(server, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + pieces)
    assert_clean_error(answer, 413)
    assert closed


def test_expect_100_continue(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        buffer = bytearray()
        assert read_answer(sock, buffer).status == 100
        sock.sendall(b"abcd")
        answer = read_answer(sock, buffer)
        assert answer.status == 200 and json.loads(answer.body)["length"] == 4
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\nExpect: 100-continue\r\n\r\n"
    answer, closed = exchange(server, head)  # refused at once: no 100 Continue first
    assert_clean_error(answer, 413)
    assert closed


def test_a_client_too_slow_with_its_headers_gets_408(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):  # a byte now and then does not keep the connection
            time.sleep(0.2)
            sock.sendall(b"X-A: b\r\n")
        started = time.monotonic()
        data = read_all(sock)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < 2


def test_a_client_too_slow_with_its_body_gets_408(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        data = read_all(sock)
    assert data.startswith(b"HTTP/1.1 408 ")


def test_idle_and_silent_connections_are_closed(server: Running) -> None:
    with connect(server) as sock:  # connected, never a byte
        started = time.monotonic()
        assert read_all(sock) == b""
        assert time.monotonic() - started < 2
    with connect(server) as sock:  # one request, then idle past the keep-alive time
        sock.sendall(get("/echo"))
        buffer = bytearray()
        assert read_answer(sock, buffer).status == 200
        started = time.monotonic()
        assert read_all(sock) == b""
        assert 0.4 < time.monotonic() - started < 2


def test_app_failures_never_show_a_traceback(server: Running) -> None:
    answer, closed = exchange(server, get("/boom"))
    assert_clean_error(answer, 500)
    assert closed
    with connect(server) as sock:  # failed mid-answer: the connection ends without the chunked terminator
        sock.sendall(get("/half"))
        data = read_all(sock)
    assert b"partial" in data and not data.endswith(b"0\r\n\r\n") and SECRET.encode() not in data


def test_direct_body_writes_are_framed(server: Running) -> None:
    answer, closed = exchange(server, get("/stream"))
    assert answer.status == 200 and answer.body == b"one two three!" and not closed


def test_a_client_that_does_not_read_pauses_the_writer(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(get("/flood"))
        wait_for(lambda: server.seen.pauses == 1, 30, "the writer to pause")
        assert server.seen.pauses == 1 and server.seen.resumes == 0
        buffer = bytearray()
        answer = read_answer(sock, buffer)
    assert server.seen.resumes >= 1
    assert answer.status == 200 and answer.body.endswith(b"end")


def test_a_client_leaving_is_reported_to_the_app(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(get("/wait-disconnect"))
        assert b"started" in sock.recv(4096)
    wait_for(lambda: server.seen.disconnects, 5, "the disconnect", 0.01)
