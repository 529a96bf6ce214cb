"""Reading HTTP answers off a raw socket, for tests that speak to a server byte by byte."""

from __future__ import annotations

import socket
from dataclasses import dataclass


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    return b"".join(parts)


@dataclass
class Answer:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


def read_answer(sock: socket.socket, buffer: bytearray, head_only: bool = False) -> Answer:
    """One answer from `buffer` + the socket; what follows it stays in `buffer`."""

    def need(size: int) -> None:
        while len(buffer) < size:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed in an answer: {bytes(buffer)!r}"
            buffer.extend(chunk)

    def line() -> bytes:
        while b"\r\n" not in buffer:
            need(len(buffer) + 1)
        end = buffer.index(b"\r\n")
        text = bytes(buffer[:end])
        del buffer[: end + 2]
        return text

    status = int(line().split()[1])
    headers: dict[bytes, bytes] = {}
    while text := line():
        name, _, value = text.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if head_only or status in (100, 204):
        return Answer(status, headers, b"")
    if b"content-length" in headers:
        size = int(headers[b"content-length"])
        need(size)
        body = bytes(buffer[:size])
        del buffer[:size]
        return Answer(status, headers, body)
    assert headers.get(b"transfer-encoding") == b"chunked", headers
    body = b""
    while size := int(line(), 16):
        need(size + 2)
        body += bytes(buffer[:size])
        del buffer[: size + 2]
    assert line() == b""
    return Answer(status, headers, body)
