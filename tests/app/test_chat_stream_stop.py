"""Stopping a chat before its answer has begun. The gateway holds a chat for a model that is still loading and
sends nothing until the model is ready, minutes for a large one; the bundled model loads too fast to press Stop in
between. The endpoint here is a socket that takes the request and never answers: the smallest stand-in for that
wait."""

from __future__ import annotations

import socket
import threading

from app.client import ChatStream

STOPPED_WITHIN_S = 5.0


def test_a_chat_waiting_for_its_answer_is_stopped_at_once() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(10)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
        stream = ChatStream(url, "key", "big-model", [{"role": "user", "content": "Hello"}], 8)
        outcome: list[object] = []

        def read() -> None:
            try:
                outcome.append(list(stream))
            except Exception as exc:  # what the chat thread would get instead of an end
                outcome.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        connection, _ = server.accept()
        with connection:
            connection.settimeout(10)
            assert b"POST /v1/chat/completions" in connection.recv(65536)  # sent: now it waits for the head
            stream.cancel()
            reader.join(STOPPED_WITHIN_S)
            assert not reader.is_alive(), "Stop left the chat waiting for an answer"
    assert outcome == [[]] and stream.cancelled  # ended as stopped, not as an error
