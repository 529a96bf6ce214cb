"""A tiny OpenAI-style streaming server on raw asyncio, for measuring what a proxy in front of an engine costs.

Run by hand from the repository root (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/synthetic_engine.py --port 9100 [--token-delay-ms 5]

It answers, over hand-written HTTP/1.1 with keep-alive:

  - GET /v1/models: one model, `synth`;
  - POST /v1/chat/completions and /v1/completions. With `"stream": true` the answer is Server-Sent Events in
    `Transfer-Encoding: chunked`: a role chunk (chat only), then `max_tokens` content chunks of one short word
    each, then a finish chunk (and a usage chunk if `stream_options.include_usage`), then `data: [DONE]`. One
    HTTP chunk per event, written as soon as it is due: as fast as the loop allows (yielding to other streams
    between events) or every `--token-delay-ms`. Without streaming, one JSON answer with Content-Length.

Every event is built once at start-up as bytes, so the cost per chunk is a transport write and a loop turn.
No model, no tokenizer: the engine's own time is as close to zero as Python allows, so a proxy's cost shows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
from collections.abc import Coroutine
from typing import Any

MODEL = "synth"
WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "elit", "sed", "do", "magna", "aliqua", "enim", "minim")
DEFAULT_MAX_TOKENS = 16
MAX_TOKENS_CAP = 100_000
MAX_BODY = 4 * 1024 * 1024
MAX_HEADER = 64 * 1024


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict[str, Any]) -> bytes:
    return _frame(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def _chat_chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-synth",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _text_chunk(text: str, finish: str | None) -> dict[str, Any]:
    return {
        "id": "cmpl-synth",
        "object": "text_completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
    }


class _Events:
    """Pre-built HTTP chunks for one route."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        if chat:
            self.role: bytes | None = _event(_chat_chunk({"role": "assistant", "content": ""}, None))
            self.words = [_event(_chat_chunk({"content": " " + word}, None)) for word in WORDS]
            self.finish = _event(_chat_chunk({}, "length"))
        else:
            self.role = None
            self.words = [_event(_text_chunk(" " + word, None)) for word in WORDS]
            self.finish = _event(_text_chunk("", "length"))
        self.done = _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"

    def usage(self, tokens: int) -> bytes:
        usage = {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": tokens + 8}
        chunk = _chat_chunk({}, None) if self.chat else _text_chunk("", None)
        chunk["choices"] = []
        chunk["usage"] = usage
        return _event(chunk)

    def whole(self, tokens: int) -> dict[str, Any]:
        text = "".join(" " + WORDS[i % len(WORDS)] for i in range(tokens))
        usage = {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": tokens + 8}
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"
            }  # fmt: skip
            return {"id": "chatcmpl-synth", "object": "chat.completion", "created": 0, "model": MODEL,
                    "choices": [choice], "usage": usage}  # fmt: skip
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return {"id": "cmpl-synth", "object": "text_completion", "created": 0, "model": MODEL,
                "choices": [choice], "usage": usage}  # fmt: skip


SSE_HEADERS = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"\r\n"
)


class SyntheticEngine:
    def __init__(self, token_delay_s: float) -> None:
        self.token_delay_s = token_delay_s
        self.routes = {b"/v1/chat/completions": _Events(chat=True), b"/v1/completions": _Events(chat=False)}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one_request(reader, writer):
                pass
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; True to keep the connection open."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        if len(head) > MAX_HEADER:
            return False
        lines = head[:-4].split(b"\r\n")
        method, path, version = lines[0].split(b" ", 2)
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        keep_alive = headers.get(b"connection", b"").lower() != b"close" and version == b"HTTP/1.1"
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            body = await _read_chunked(reader)
        else:
            length = int(headers.get(b"content-length", b"0"))
            if length > MAX_BODY:
                return False
            body = await reader.readexactly(length) if length else b""
        path = path.split(b"?", 1)[0]
        if method == b"GET" and path == b"/v1/models":
            models = {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "bench"}]}
            await _send_json(writer, 200, models, keep_alive)
            return keep_alive
        events = self.routes.get(path)
        if method != b"POST" or events is None:
            error = {"error": {"message": "not found", "type": "invalid_request_error"}}
            await _send_json(writer, 404, error, keep_alive)
            return keep_alive
        try:
            request = json.loads(body)
            tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or DEFAULT_MAX_TOKENS)
        except (ValueError, TypeError, AttributeError):
            error = {"error": {"message": "bad request body", "type": "invalid_request_error"}}
            await _send_json(writer, 400, error, keep_alive)
            return keep_alive
        tokens = max(1, min(tokens, MAX_TOKENS_CAP))
        if not request.get("stream"):
            await _send_json(writer, 200, events.whole(tokens), keep_alive)
            return keep_alive
        options = request.get("stream_options") or {}
        await self._stream(writer, events, tokens, isinstance(options, dict) and bool(options.get("include_usage")))
        return keep_alive

    async def _stream(self, writer: asyncio.StreamWriter, events: _Events, tokens: int, usage: bool) -> None:
        write, delay, words = writer.write, self.token_delay_s, events.words
        transport = writer.transport
        write(SSE_HEADERS + events.role if events.role is not None else SSE_HEADERS)
        n_words = len(words)
        for i in range(tokens):
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let other streams (and the reader side) run between events
            if transport.is_closing():
                raise ConnectionResetError("client went away")
            write(words[i % n_words])
            if transport.get_write_buffer_size() > 256 * 1024:
                await writer.drain()
        tail = events.finish + (events.usage(tokens) if usage else b"") + events.done
        write(tail)
        await writer.drain()


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers expected
            return b"".join(parts)
        total += size
        if total > MAX_BODY:
            raise ValueError("body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def _send_json(writer: asyncio.StreamWriter, status: int, obj: dict[str, Any], keep_alive: bool) -> None:
    body = json.dumps(obj).encode()
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"Error")
    connection = b"keep-alive" if keep_alive else b"close"
    writer.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n%s"
        % (status, reason, len(body), connection, body)
    )
    await writer.drain()


async def serve_until_signalled(server: asyncio.AbstractServer) -> None:
    """Serve until SIGTERM or SIGINT (the benchmark stops its servers with SIGTERM)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


async def serve(host: str, port: int, token_delay_ms: float) -> None:
    engine = SyntheticEngine(token_delay_ms / 1000.0)
    await serve_until_signalled(await asyncio.start_server(engine.handle, host, port, backlog=1024, limit=MAX_HEADER))


def parse_loopback_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser`'s arguments plus --host (loopback only) and --port."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("loopback only")
    return args


def run(main: Coroutine[Any, Any, int | None]) -> int:
    """Run `main` on uvloop where it is installed; its exit status (None: 0)."""
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        return runner.run(main) or 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--token-delay-ms", type=float, default=0.0, help="pause before each content chunk (0)")
    args = parse_loopback_args(parser, argv)
    return run(serve(args.host, args.port, args.token_delay_ms))


if __name__ == "__main__":
    raise SystemExit(main())
