"""The core's OpenAI stream, answered in Ollama's words: NDJSON pieces (`done: false`) and a last object with
`done: true`, the reason and the counts and durations Ollama reports, or the same as one object when the client did
not ask for a stream. A stream that fails midway ends with a line `{"error": ...}`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.service.dialects.inner import InnerAnswer, error_message, sse_events
from app.service.http.asgi import Send

NDJSON_HEADERS = [(b"content-type", b"application/x-ndjson")]
JSON_HEADERS = [(b"content-type", b"application/json; charset=utf-8")]
_DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop", "content_filter": "stop"}


def created_at() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class Clock:
    """When the request came (`started_ns`), how long its model took to load, and when the core was asked."""

    started_ns: int = field(default_factory=time.perf_counter_ns)
    load_ns: int = 0
    asked_ns: int = 0

    def asked(self) -> None:
        self.asked_ns = time.perf_counter_ns()


@dataclass
class _ToolCall:
    name: str = ""
    arguments: str = ""


class OllamaAnswer:
    """One answer being written: `chat` ones carry a `message`, generate ones a `response`."""

    def __init__(self, model: str, chat: bool, clock: Clock) -> None:
        self.model, self.chat, self.clock = model, chat, clock
        self.text: list[str] = []
        self.tool_calls: dict[int, _ToolCall] = {}
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def feed(self, event: dict[str, Any]) -> str:
        """Take one event of the core's stream; the text it adds."""
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
        choices = event.get("choices") or []
        choice: dict[str, Any] = (
            choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        )
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        given = choice.get("delta")
        delta: dict[str, Any] = given if isinstance(given, dict) else {}
        for call in delta.get("tool_calls") or []:
            self._add_tool_call(call)
        text = delta.get("content") if "content" in delta else choice.get("text")  # chat's or completions' stream
        if (isinstance(text, str) and text) or delta.get("tool_calls"):
            self.last_ns = time.perf_counter_ns()
            self.first_ns = self.first_ns or self.last_ns
        if isinstance(text, str) and text:
            self.text.append(text)
            return text
        return ""

    def _add_tool_call(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = call.get("index", len(self.tool_calls))
        known = self.tool_calls.setdefault(index if isinstance(index, int) else len(self.tool_calls), _ToolCall())
        given = call.get("function")
        function: dict[str, Any] = given if isinstance(given, dict) else {}
        known.name += function.get("name") or ""
        known.arguments += function.get("arguments") or ""

    def piece(self, text: str) -> dict[str, Any]:
        """A streamed piece with `text`."""
        body: dict[str, Any] = {"model": self.model, "created_at": created_at()}
        if self.chat:
            body["message"] = {"role": "assistant", "content": text}
        else:
            body["response"] = text
        body["done"] = False
        return body

    def last(self, whole: bool) -> dict[str, Any]:
        """The last object: all the text when `whole` (not streamed), else none; the counts and durations."""
        body = self.piece("".join(self.text) if whole else "")
        if self.chat and self.tool_calls:
            body["message"]["tool_calls"] = [self._tool_call(call) for _, call in sorted(self.tool_calls.items())]
        now, clock = time.perf_counter_ns(), self.clock
        first = self.first_ns or now
        body.update(
            done=True,
            done_reason=_DONE_REASONS.get(self.finish_reason or "stop", self.finish_reason),
            total_duration=now - clock.started_ns,
            load_duration=clock.load_ns,
            prompt_eval_count=self.prompt_tokens or 0,
            prompt_eval_duration=max(first - clock.asked_ns, 0),
            eval_count=self.completion_tokens if self.completion_tokens is not None else len(self.text),
            eval_duration=max((self.last_ns or now) - first, 0),
        )
        return body

    @staticmethod
    def _tool_call(call: _ToolCall) -> dict[str, Any]:
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):  # Ollama's clients take an object: the model's text is kept whole
            arguments = {"arguments": call.arguments}
        return {"function": {"name": call.name, "arguments": arguments}}


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode() + b"\n"


async def relay(answer: InnerAnswer, written: OllamaAnswer, send: Send, stream: bool) -> None:
    """Answer the client from the core's stream (`answer`, a 200), streamed or as one object."""
    if stream:
        await send({"type": "http.response.start", "status": 200, "headers": NDJSON_HEADERS})
    failed: str | None = None
    async for event in sse_events(answer.chunks()):  # read to its end, so that the core logs the request whole
        if failed is not None:
            continue
        if "error" in event:
            failed = error_message(event)[0]
            continue
        text = written.feed(event)
        if stream and text:
            await send({"type": "http.response.body", "body": _line(written.piece(text)), "more_body": True})
    if failed is not None:
        if stream:
            await send({"type": "http.response.body", "body": _line({"error": failed})})
        else:
            await send_whole(send, 500, {"error": failed})
        return
    last = written.last(whole=not stream)
    if stream:
        await send({"type": "http.response.body", "body": _line(last)})
    else:
        await send_whole(send, 200, last)


async def send_whole(send: Send, status: int, body: dict[str, Any]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
