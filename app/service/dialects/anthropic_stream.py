"""The core's OpenAI stream written as Anthropic's Messages stream, event by event: `message_start`, then per content
block `content_block_start`, its `content_block_delta`s (`text_delta`, or `input_json_delta` for a tool call's
arguments) and `content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`. An error event
of the core's becomes an `error` event, after which nothing more is sent, as Anthropic's API does."""

from __future__ import annotations

import json
from typing import Any

from app.service.dialects.anthropic_answer import (
    as_object,
    error_body,
    first_choice,
    message_id,
    stop_reason,
    tool_use_id,
    usage,
)


def sse(kind: str, data: dict[str, Any]) -> bytes:
    """One server-sent event with its `event:` line, which Anthropic's clients dispatch on."""
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"


class StreamTranslation:
    """One stream's translation: `start()` once, `feed()` each OpenAI event, `finish()` at the end; each answers
    the bytes to send. After an error event `ended` is True and the rest is not to be sent."""

    def __init__(self, model: str) -> None:
        self._model = model
        self._index = -1  # of the open content block; -1 before the first
        self._open: str | None = None  # "text", or the OpenAI index of the tool call being streamed
        self._called_tools = False
        self._finish_reason: Any = None
        self._usage: Any = None
        self.ended = False

    @property
    def finished(self) -> bool:
        """Whether the model's last event (the one with the finish reason) came."""
        return self._finish_reason is not None

    def start(self) -> bytes:
        """`message_start`: the message as it stands before its first token, its usage not known yet."""
        message: dict[str, Any] = {
            "id": message_id(), "type": "message", "role": "assistant", "model": self._model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0},
        }  # fmt: skip
        return sse("message_start", {"type": "message_start", "message": message})

    def feed(self, event: dict[str, Any]) -> bytes:
        """The events one OpenAI stream event makes: a block opened or closed, its deltas, or an error."""
        if self.ended:
            return b""
        error = event.get("error")
        if error is not None:
            self.ended = True
            said = error.get("message") if isinstance(error, dict) else None
            return sse("error", error_body("api_error", str(said or "The engine failed mid-stream.")))
        if event.get("usage") is not None:
            self._usage = event["usage"]
        choice = first_choice(event)
        if choice.get("finish_reason") is not None:
            self._finish_reason = choice["finish_reason"]
        delta = as_object(choice.get("delta"))
        out = b""
        text = delta.get("content")
        if isinstance(text, str) and text:
            if self._open != "text":
                out += self._open_block({"type": "text", "text": ""}, "text")
            out += self._delta({"type": "text_delta", "text": text})
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            if isinstance(call, dict):
                out += self._tool_call(call)
        return out

    def _tool_call(self, call: dict[str, Any]) -> bytes:
        """A piece of a tool call: its first opens a tool_use block (id and name), the rest add to its arguments."""
        out = b""
        key = f"tool:{call.get('index', 0)}"
        function = as_object(call.get("function"))
        if self._open != key:
            self._called_tools = True
            block = {"type": "tool_use", "id": tool_use_id(call.get("id")), "name": str(function.get("name") or ""),
                     "input": {}}  # fmt: skip
            out += self._open_block(block, key)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            out += self._delta({"type": "input_json_delta", "partial_json": arguments})
        return out

    def _open_block(self, block: dict[str, Any], key: str) -> bytes:
        out = self._close_block()
        self._index += 1
        self._open = key
        return out + sse("content_block_start", {"type": "content_block_start", "index": self._index,
                                                 "content_block": block})  # fmt: skip

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})

    def _close_block(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def finish(self) -> bytes:
        """The end of the message: the stop reason, and the usage the core's last event carried (input tokens too:
        they are not known when `message_start` is sent, and Anthropic's clients take them from here)."""
        if self.ended:
            return b""
        self.ended = True
        delta = {"stop_reason": stop_reason(self._finish_reason, self._called_tools), "stop_sequence": None}
        end = sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage(self._usage)})
        return self._close_block() + end + sse("message_stop", {"type": "message_stop"})
