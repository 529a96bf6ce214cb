"""An `--upstream` server whose answers end when it closes the connection (no Content-Length, no chunks): Python's
`http.server` with its defaults (HTTP/1.0), or an HTTP/1.1 server saying `Connection: close`. A real service in
front of real `http.server` servers, asked by the official OpenAI client and by `modeldeck run`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.paths import AppPaths
from app.service.gateway.upstream_endpoint import UpstreamError
from tests.support.raw_upstream import fetch
from tests.support.service import REPO, RunningService, start_service_process, stop_service_process
from tests.support.standin_http import StandInHandler, serving

WORDS = ["Hello", " there", "."]


def _event(delta: dict[str, str], finish: str | None = None) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(chunk)}\n\n".encode()


class _OldServer(StandInHandler):
    """http.server's defaults: HTTP/1.0, each answer's body ended by closing the connection."""

    def _head(self, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        if self.protocol_version == "HTTP/1.1":
            self.send_header("Connection", "close")
        self.end_headers()

    def do_GET(self) -> None:
        self._head("application/json")
        self.wfile.write(json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not request.get("stream"):
            self._head("application/json")
            message = {"role": "assistant", "content": "".join(WORDS)}
            self.wfile.write(json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]
                                         }).encode())  # fmt: skip
            return
        self._head("text/event-stream")
        for word in WORDS:
            self.wfile.write(_event({"content": word}))
            self.wfile.flush()
        self.wfile.write(_event({}, "stop") + b"data: [DONE]\n\n")


class _ClosingServer(_OldServer):
    """HTTP/1.1, but `Connection: close` and no length: the body still ends at the close."""

    protocol_version = "HTTP/1.1"


@pytest.fixture(params=[_OldServer, _ClosingServer], ids=["http-1.0", "http-1.1-connection-close"])
def upstream(request: pytest.FixtureRequest, paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    with serving(request.param) as url:
        service = start_service_process(paths, tmp_path, "--upstream", f"old={url}")
        yield service
        stop_service_process(service)


def test_an_answer_ended_by_closing_the_connection_is_whole(upstream: RunningService) -> None:
    client = upstream.openai_client()
    whole = client.chat.completions.create(model="old", messages=[{"role": "user", "content": "Hi"}])
    assert whole.choices[0].message.content == "Hello there."
    stream = client.chat.completions.create(model="old", messages=[{"role": "user", "content": "Hi"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Hello there."
    run = subprocess.run([sys.executable, "-m", "app", "run", "old", "Say hello."], capture_output=True, text=True,
                         timeout=120, cwd=REPO)  # fmt: skip
    assert (run.returncode, run.stdout, run.stderr) == (0, "Hello there.\n", "")


def test_an_answer_with_a_length_cut_by_the_close_still_fails() -> None:
    """The close ends only a body that has no length: one shorter than its Content-Length is cut short."""

    async def cut(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        await writer.drain()
        writer.close()

    with pytest.raises(UpstreamError, match="closed the connection"):
        asyncio.run(fetch(cut, None))
