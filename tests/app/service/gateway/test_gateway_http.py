"""The /v1 endpoint at the HTTP level, on the real service (`modeldeck serve`, its own HTTP server by default):
what reaches a client for HTTP that is odd, too big or malformed. No engine is needed: these requests end in the
gateway. (The gateway's other tests run on either server: MODELDECK_GATEWAY_SERVER=uvicorn for the fallback.)"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.paths import AppPaths
from tests.support.raw_http import Answer, read_all, read_answer
from tests.support.service import RunningService, start_service_process, stop_service_process

KEY = "test-key"


@pytest.fixture
def gateway(paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    service = start_service_process(paths, tmp_path, "--gateway-server", "own", api_key=KEY)
    yield service
    stop_service_process(service)


def connect(service: RunningService) -> socket.socket:
    port = int(service.url.rsplit(":", 1)[1].split("/")[0])
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def request(method: str, path: str, body: bytes = b"", version: str = "1.1", **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "Host: 127.0.0.1", f"Authorization: Bearer {KEY}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def assert_openai_error(answer: Answer, status: int) -> None:
    assert answer.status == status
    error = json.loads(answer.body)["error"]
    assert error["message"] and error["type"]
    assert b"Traceback" not in answer.body


def test_the_uvicorn_fallback_serves_the_endpoint(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--gateway-server", "uvicorn", api_key=KEY)
    try:
        with connect(service) as sock:
            sock.sendall(request("GET", "/v1/models"))
            answer = read_answer(sock, bytearray())
        assert answer.status == 200
        assert {model["id"] for model in json.loads(answer.body)["data"]} >= {"smollm2-135m-instruct"}
        with connect(service) as sock:
            sock.sendall(request("GET", "/v1/models").replace(KEY.encode(), b"wrong-key"))
            assert_openai_error(read_answer(sock, bytearray()), 401)
    finally:
        stop_service_process(service)


def test_oversized_and_malformed_requests_get_openai_errors(gateway: RunningService) -> None:
    for raw, status in (
        (request("GET", "/v1/models", X_Big="b" * 40_000), 431),
        (request("GET", "/v1/models?" + "q" * 10_000), 414),
        (b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n", 400),
        (b"BREW /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
    ):
        with connect(gateway) as sock:
            sock.sendall(raw)
            assert_openai_error(read_answer(sock, bytearray()), status)
            assert read_all(sock) == b""  # and the connection is closed
    assert gateway.client.health()["status"] == "ok"


def test_a_chunked_body_over_the_limit_gets_413(gateway: RunningService) -> None:
    head = request("POST", "/v1/chat/completions", Content_Type="application/json", Transfer_Encoding="chunked")
    piece = b"100000\r\n" + b"x" * 0x100000 + b"\r\n"
    with connect(gateway) as sock:
        sock.sendall(head)
        try:
            for _ in range(6):
                sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before all of it was sent
        answer = read_answer(sock, bytearray())
    assert_openai_error(answer, 413)
    assert "4194304 bytes" in json.loads(answer.body)["error"]["message"]


def test_pipelined_head_and_http10_requests(gateway: RunningService) -> None:
    with connect(gateway) as sock:  # two requests in one write, answered in order
        sock.sendall(request("GET", "/v1/models") + request("HEAD", "/v1/models") + request("GET", "/v1/nothing"))
        buffer = bytearray()
        assert read_answer(sock, buffer).status == 200
        head = read_answer(sock, buffer, head_only=True)
        assert head.status == 200 and int(head.headers[b"content-length"]) > 0  # GET's length, and no body
        assert_openai_error(read_answer(sock, buffer), 404)
    with connect(gateway) as sock:
        sock.sendall(request("GET", "/v1/models", version="1.0"))
        data = read_all(sock)  # answered, then closed
    assert data.startswith(b"HTTP/1.1 200 ") and json.loads(data.partition(b"\r\n\r\n")[2])["object"] == "list"


def test_expect_100_continue_is_answered_after_the_checks(gateway: RunningService) -> None:
    body = b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}'
    head = request("POST", "/v1/chat/completions", Content_Type="application/json", Expect="100-continue")
    head = head[:-2] + f"Content-Length: {len(body)}\r\n\r\n".encode()
    with connect(gateway) as sock:
        sock.sendall(head)
        buffer = bytearray()
        assert read_answer(sock, buffer).status == 100
        sock.sendall(body)
        assert_openai_error(read_answer(sock, buffer), 404)
    with connect(gateway) as sock:  # a client without the key gets 401, not 100
        sock.sendall(head.replace(f"Bearer {KEY}".encode(), b"Bearer wrong"))
        assert_openai_error(read_answer(sock, bytearray()), 401)
