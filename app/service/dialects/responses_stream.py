"""A chat completions stream from the core as the Responses API's event sequence.

The order is OpenAI's: `response.created`, `response.in_progress`; for the text, `response.output_item.added`
(a message), `response.content_part.added`, `response.output_text.delta` per chunk, `response.output_text.done`,
`response.content_part.done`, `response.output_item.done`; for each tool call, `response.output_item.added`
(a function_call), `response.function_call_arguments.delta` per chunk, `...arguments.done`,
`response.output_item.done`; then `response.completed`, or `response.incomplete` when max_output_tokens cut the
answer, or `response.failed` when the core's stream carried an error. Every event has its `sequence_number`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.service.dialects.responses_answer import (
    ResponseDraft,
    as_object,
    call_item,
    message_item,
    new_id,
    text_part,
    usage,
)


def encode(event: dict[str, Any]) -> bytes:
    """One server-sent event, its type named in `event:` as OpenAI writes it."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


@dataclass
class _Call:
    index: int  # its place in `output`
    item_id: str
    call_id: str
    name: str
    arguments: str = ""


@dataclass
class ResponseEvents:
    """The events of one streamed response; `feed` each chat chunk, then `finish`. `body` is the last response."""

    draft: ResponseDraft
    _sequence: int = 0
    _output: list[dict[str, Any]] = field(default_factory=list)
    _text: str | None = None  # the message being written, None while there is none
    _text_index: int = 0
    _text_id: str = ""
    _calls: dict[int, _Call] = field(default_factory=dict)  # by the chat stream's tool call index
    _finish: str | None = None
    _usage: dict[str, Any] | None = None
    body: dict[str, Any] = field(default_factory=dict)

    def start(self) -> Iterator[dict[str, Any]]:
        self.body = self.draft.body("in_progress", [])
        yield self._event("response.created", response=self.body)
        yield self._event("response.in_progress", response=self.body)

    def feed(self, chunk: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if isinstance(chunk.get("usage"), dict):
            self._usage = usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            self._finish = choice.get("finish_reason") or self._finish
            delta = as_object(choice.get("delta"))
            if delta.get("content"):
                yield from self._text_delta(str(delta["content"]))
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    yield from self._call_delta(call)

    @property
    def finished(self) -> bool:
        """Whether the model's answer ended (a finish reason came): a stream cut before is a failure."""
        return self._finish is not None

    def finish(self) -> Iterator[dict[str, Any]]:
        """The closing events of the open items, then `response.completed` (or `.incomplete`)."""
        yield from self._close_text()
        for call in self._calls.values():
            yield from self._close_call(call)
        body = self.draft.body("completed", self._output, self._usage, self._finish)
        self.body = body
        yield self._event("response.incomplete" if body["status"] == "incomplete" else "response.completed",
                          response=body)  # fmt: skip

    def fail(self, message: str, code: str = "server_error") -> Iterator[dict[str, Any]]:
        """`response.failed` after an error in the core's stream: what was written so far, and the error."""
        self.body = self.draft.body("failed", self._output, self._usage, error={"code": code, "message": message})
        yield self._event("response.failed", response=self.body)

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _text_delta(self, delta: str) -> Iterator[dict[str, Any]]:
        if self._text is None:
            self._text, self._text_index, self._text_id = "", len(self._output), new_id("msg")
            item = message_item("", "in_progress", self._text_id)
            self._output.append(item)
            yield self._event("response.output_item.added", output_index=self._text_index, item=item)
            yield self._event("response.content_part.added", item_id=self._text_id, output_index=self._text_index,
                              content_index=0, part=text_part(""))  # fmt: skip
        self._text += delta
        yield self._event("response.output_text.delta", item_id=self._text_id, output_index=self._text_index,
                          content_index=0, delta=delta, logprobs=[])  # fmt: skip

    def _close_text(self) -> Iterator[dict[str, Any]]:
        if self._text is None:
            return
        text, index, item_id = self._text, self._text_index, self._text_id
        self._text = None
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        yield self._event("response.output_text.done", **where, text=text, logprobs=[])
        yield self._event("response.content_part.done", **where, part=text_part(text))
        item = self._output[index] = message_item(text, self._status(), item_id)
        yield self._event("response.output_item.done", output_index=index, item=item)

    def _call_delta(self, delta: dict[str, Any]) -> Iterator[dict[str, Any]]:
        index = delta.get("index", 0)
        function = as_object(delta.get("function"))
        call = self._calls.get(index)
        if call is None:
            yield from self._close_text()  # the model wrote its text before its calls
            call_id = str(delta.get("id") or new_id("call"))
            call = self._calls[index] = _Call(len(self._output), new_id("fc"), call_id, str(function.get("name") or ""))
            item = call_item(call.call_id, call.name, "", "in_progress", call.item_id)
            self._output.append(item)
            yield self._event("response.output_item.added", output_index=call.index, item=item)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments += arguments
            yield self._event("response.function_call_arguments.delta", item_id=call.item_id,
                              output_index=call.index, delta=arguments)  # fmt: skip

    def _close_call(self, call: _Call) -> Iterator[dict[str, Any]]:
        yield self._event("response.function_call_arguments.done", item_id=call.item_id, output_index=call.index,
                          name=call.name, arguments=call.arguments)  # fmt: skip
        item = self._output[call.index] = call_item(call.call_id, call.name, call.arguments, self._status(),
                                                    call.item_id)  # fmt: skip
        yield self._event("response.output_item.done", output_index=call.index, item=item)

    def _status(self) -> str:
        return "incomplete" if self._finish == "length" else "completed"
