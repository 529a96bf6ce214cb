"""The Anthropic dialect's translations where a real engine cannot be made to show them on demand: a request's
turns as the OpenAI messages the core gets, and the core's answers that go wrong (an error mid-stream, a stream cut
short, a queue full) as Anthropic's client reads them. The core here is a small ASGI app answering what it is told."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from app.service.dialects.anthropic import AnthropicDialect
from app.service.dialects.anthropic_request import AnthropicInvalid, translate
from app.service.gateway.prompt_count import PromptCounter
from app.service.http.asgi import Message, Receive, Scope, Send


def test_turns_become_openai_messages() -> None:
    body: Any = {
        "model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "Be brief."}], "stop_sequences": ["END"],
        "temperature": 0.5, "top_k": 40, "metadata": {"user_id": "u"}, "stream": True,
        "tools": [{"name": "f", "description": "F.", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
        "messages": [
            {"role": "user", "content": "Call f."},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "...", "signature": "s"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"x": [1, 2]}},
            ]},
            {"role": "user", "content": [
                {"type": "text", "text": "Here:"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42", "is_error": True},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            ]},
        ],
    }  # fmt: skip
    request = translate(body)
    payload = request.payload
    assert request.stream and request.stop_sequences == ("END",)
    assert payload["stop"] == ["END"] and payload["top_k"] == 40 and payload["temperature"] == 0.5
    assert payload["stream_options"] == {"include_usage": True} and "metadata" not in payload
    assert payload["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "description": "F."}}
    ]
    assert payload["tool_choice"] == "required"
    system, user, assistant, tool, last = payload["messages"]
    assert system == {"role": "system", "content": "Be brief."} and user == {"role": "user", "content": "Call f."}
    assert assistant["content"] == "" and assistant["tool_calls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": '{"x": [1, 2]}'}}
    ]
    # The tool's result comes right after the call, before the rest of the user's turn.
    assert tool == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: 42"}
    assert last == {"role": "user", "content": [
        {"type": "text", "text": "Here:"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]}  # fmt: skip
    named = translate({**body, "tool_choice": {"type": "tool", "name": "f"}}).payload["tool_choice"]
    assert named == {"type": "function", "function": {"name": "f"}}


def test_count_tokens_takes_no_generation_fields() -> None:
    counting = translate({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, counting=True)
    assert counting.payload == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(AnthropicInvalid, match="max_tokens"):
        translate({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}, counting=True)


def core_answering(status: int, headers: list[tuple[bytes, bytes]], pieces: list[bytes]) -> Any:
    """A core that answers every request with `status`, `headers` and `pieces` of body, and keeps what it got."""
    got: list[dict[str, Any]] = []

    async def core(scope: Scope, receive: Receive, send: Send) -> None:
        got.append(json.loads((await receive())["body"]))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        for piece in pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    core.got = got  # type: ignore[attr-defined]
    return core


async def serve(core: Any, body: dict[str, Any]) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request to the dialect over `core`: its status, headers and whole body."""
    dialect = AnthropicDialect(core, cast(PromptCounter, None), 1 << 20)
    scope: Scope = {"type": "http", "method": "POST", "path": "/v1/messages", "headers": [
        (b"content-type", b"application/json")]}  # fmt: skip
    sent: list[Message] = []
    requests = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive() -> Message:
        return requests.pop() if requests else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await dialect(scope, receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def events_of(stream: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Each server-sent event's `event:` name and data, checked to agree as Anthropic's stream has them."""
    events = []
    for block in stream.decode().strip().split("\n\n"):
        name_line, data_line = block.split("\n")
        name, data = name_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))
        assert data["type"] == name, block
        events.append((name, data))
    return events


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    event = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


STREAMED = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "stream": True}
SSE = [(b"content-type", b"text/event-stream")]


async def test_text_then_a_tool_call_stream_as_two_blocks() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": '}}
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}\n\n'
    pieces = [chunk({"role": "assistant", "content": "Hi"}), chunk({"tool_calls": [call]}),
              chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}), chunk({}, "tool_calls"),
              usage, b"data: [DONE]\n\n"]  # fmt: skip
    core = core_answering(200, SSE, pieces)
    status, headers, body = await serve(core, STREAMED)
    assert status == 200 and headers[b"content-type"].startswith(b"text/event-stream")
    assert core.got[0]["stream_options"] == {"include_usage": True}
    events = events_of(body)
    assert [name for name, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop", "content_block_start",
        "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop",
    ]  # fmt: skip
    assert events[1][1]["content_block"] == {"type": "text", "text": ""} and events[1][1]["index"] == 0
    assert events[4][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}
    assert [events[i][1]["delta"]["partial_json"] for i in (5, 6)] == ['{"a": ', "1}"]
    assert events[4][1]["index"] == events[7][1]["index"] == 1
    assert events[8][1]["delta"]["stop_reason"] == "tool_use"
    assert events[8][1]["usage"] == {"input_tokens": 7, "output_tokens": 3}


async def test_an_error_mid_stream_is_an_error_event() -> None:
    """The gateway ends a stream whose engine stopped answering with an OpenAI error event: the client gets
    Anthropic's `error` event, and no message_stop that would pass the message for whole."""
    failed = b'data: {"error": {"message": "The engine stopped answering: reset.", "type": "server_error"}}\n\n'
    core = core_answering(200, SSE, [chunk({"content": "Hi"}), failed, b"data: [DONE]\n\n"])
    events = events_of((await serve(core, STREAMED))[2])
    assert [name for name, _ in events][-1] == "error" and "message_stop" not in [name for name, _ in events]
    assert events[-1][1]["error"] == {"type": "api_error", "message": "The engine stopped answering: reset."}
    cut_short = core_answering(200, SSE, [chunk({"content": "Hi"})])
    events = events_of((await serve(cut_short, STREAMED))[2])
    assert events[-1][0] == "error" and "before the model finished" in events[-1][1]["error"]["message"]


async def test_core_refusals_keep_their_status() -> None:
    full = b'{"error": {"message": "Too many requests waiting for `m`; retry in 2 s.", "type": "rate_limit_error"}}'
    core = core_answering(429, [(b"content-type", b"application/json"), (b"retry-after", b"2")], [full])
    status, headers, body = await serve(core, {**STREAMED, "stream": False})
    assert status == 429 and headers[b"retry-after"] == b"2"
    assert json.loads(body) == {"type": "error", "error": {"type": "rate_limit_error", "message": json.loads(full)[
        "error"]["message"]}}  # fmt: skip
