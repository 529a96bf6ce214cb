"""A streamed chat answer with its tool calls written as OpenAI streams them: `delta.tool_calls` with the call's
index, id, type and function name first, then pieces of its arguments, and `finish_reason` "tool_calls".

Only streams of requests with a tool plan (app.service.gateway.tool_calls) come here: each SSE event is parsed,
its content read by an extractor (app.service.gateway.tool_text), and the pieces written as events of their own.
Events without choices (usage), comments and `[DONE]` pass unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from app.service.gateway.outcome import StreamRewrite
from app.service.gateway.tool_calls import ToolPlan
from app.service.gateway.tool_text import CallStart, Piece, extractor

_DONE = b"[DONE]"


class ToolStream:
    """Rewrites one stream, read in any cuts; `inner` rewrites the engine's bytes first (a remote's model name)."""

    def __init__(self, plan: ToolPlan, inner: StreamRewrite | None = None) -> None:
        self._read = extractor(plan.mode, plan.names, plan.parallel)
        self._legacy = plan.legacy
        self._inner = inner
        self._pending = b""  # the start of an event whose end has not arrived
        self._called = False

    def feed(self, chunk: bytes) -> bytes:
        """The stream's complete events so far, rewritten; an unfinished one waits for its end."""
        if self._inner is not None:
            chunk = self._inner.feed(chunk)
        data = (self._pending + chunk).replace(b"\r\n", b"\n")  # llama-cpp-python ends lines with CRLF
        cut = data.rfind(b"\n\n")
        if cut < 0:
            self._pending = data
            return b""
        self._pending = data[cut + 2 :]
        return b"".join(self._event(event) for event in data[:cut].split(b"\n\n") if event)

    def flush(self) -> bytes:
        """What is left at the end of the stream."""
        rest = self._pending + (self._inner.flush() if self._inner is not None else b"")
        self._pending = b""
        return b"".join(self._event(event) for event in rest.replace(b"\r\n", b"\n").split(b"\n\n") if event.strip())

    def _event(self, raw: bytes) -> bytes:
        data = raw[5:].strip() if raw.startswith(b"data:") else None
        if data is None or data == _DONE:
            return raw + b"\n\n"
        try:
            event = json.loads(data)
            choice = event["choices"][0]
            delta = choice.get("delta") or {}
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):
            return raw + b"\n\n"  # usage, an error, or what the gateway cannot read: the client's to judge
        text = delta.pop("content", None)
        pieces = self._read.feed(text) if isinstance(text, str) and text else []
        finish = choice.get("finish_reason")
        if finish is not None:
            pieces += self._read.flush()
        written = [self._piece(event, choice.get("index", 0), piece, self._legacy) for piece in pieces]
        self._called = self._called or any(isinstance(piece, CallStart) for piece in pieces)
        if finish == "stop" and self._called:
            choice["finish_reason"] = "function_call" if self._legacy else "tool_calls"
        if any(value is not None for value in delta.values()) or finish is not None:
            choice["delta"] = delta
            own = _encode(event)
            written = [own, *written] if finish is None else [*written, own]
        return b"".join(written)

    @staticmethod
    def _piece(event: dict[str, Any], index: int, piece: Piece, legacy: bool) -> bytes:
        if isinstance(piece, CallStart):
            function = {"name": piece.name, "arguments": ""}
            delta: dict[str, Any] = {"tool_calls": [{"index": piece.index, "id": piece.id, "type": "function",
                                                     "function": function}]}  # fmt: skip
        elif piece.call is not None:
            delta = {"tool_calls": [{"index": piece.call, "function": {"arguments": piece.text}}]}
        else:
            delta = {"content": piece.text}
        if legacy and "tool_calls" in delta:  # `functions` asked: one call, said as the legacy `function_call`
            delta = {"function_call": delta["tool_calls"][0]["function"]}
        shell = {key: value for key, value in event.items() if key not in ("choices", "usage", "timings")}
        shell["choices"] = [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None}]
        return _encode(shell)


def _encode(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"
