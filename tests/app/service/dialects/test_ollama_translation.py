"""The Ollama dialect's translation on its own, for what the tiny model cannot be made to show on demand: a streamed
tool call reassembled into Ollama's object arguments, a stream that fails midway ending with an `{"error"}` line,
and the requests written for the core (options, keep_alive, images, tool calls and the tool answers tied to them)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from app.service.dialects.inner import InnerAnswer
from app.service.dialects.ollama_options import BadRequest, keep_alive, sampling_fields
from app.service.dialects.ollama_request import chat_request, generate_request
from app.service.dialects.ollama_stream import Clock, OllamaAnswer, relay
from app.service.http.asgi import Message

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events) + b"data: [DONE]\n\n"


async def relayed(body: bytes, stream: bool) -> tuple[int, list[bytes]]:
    """What the client gets for a core stream of `body` (split in two pieces, as a network would)."""
    messages: asyncio.Queue[Message | None] = asyncio.Queue()
    half = len(body) // 2
    for piece, more in ((body[:half], True), (body[half:], False)):
        messages.put_nowait({"type": "http.response.body", "body": piece, "more_body": more})
    answer = InnerAnswer(200, [], messages, asyncio.create_task(asyncio.sleep(0)))
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await relay(answer, OllamaAnswer("m:latest", True, Clock()), send, stream)
    return sent[0]["status"], [message["body"] for message in sent[1:]]


def delta(content: str | None = None, **extra: Any) -> dict[str, Any]:
    fields = {"content": content} if content is not None else {}
    return {"choices": [{"index": 0, "delta": {**fields, **extra}, "finish_reason": None}]}


async def test_a_streamed_tool_call_is_one_call_with_object_arguments() -> None:
    calls = [{"index": 0, "id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"ci'}},
             {"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]  # fmt: skip
    body = sse(delta("", role="assistant"), delta(tool_calls=calls[:1]), delta(tool_calls=calls[1:]),
               {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
               {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 7}})  # fmt: skip
    status, lines = await relayed(body, stream=False)
    answer = json.loads(b"".join(lines))
    assert status == 200 and answer["done"] and answer["done_reason"] == "stop", answer
    assert answer["message"]["tool_calls"] == [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}]
    assert answer["prompt_eval_count"] == 9 and answer["eval_count"] == 7, answer


async def test_a_stream_that_fails_midway_ends_with_an_error_line() -> None:
    failure = {"error": {"message": "The engine stopped answering: reset.", "type": "server_error"}}
    status, lines = await relayed(sse(delta("Hel"), delta("lo"), failure), stream=True)
    objects = [json.loads(line) for line in b"".join(lines).splitlines()]
    assert status == 200 and [o.get("message", {}).get("content") for o in objects[:2]] == ["Hel", "lo"], objects
    assert objects[-1] == {"error": "The engine stopped answering: reset."} and len(objects) == 3, objects
    status, lines = await relayed(sse(delta("Hel"), failure), stream=False)  # nothing sent yet: an error status
    assert status == 500 and json.loads(b"".join(lines)) == {"error": "The engine stopped answering: reset."}


def test_keep_alive_durations() -> None:
    assert keep_alive(None) is None
    assert [keep_alive(v).seconds for v in ("5m", "1h30m", "300ms", 0, "0", 90, -1, "-1m")] == [
        300.0, 5400.0, 0.3, 0.0, 0.0, 90.0, None, None,
    ]  # fmt: skip
    for bad in ("soon", "5 m", "nan", "1e999", [5], True, "m"):
        with pytest.raises(BadRequest):
            keep_alive(bad)


def test_options_become_the_cores_fields() -> None:
    options = {"num_predict": 8, "temperature": 0.5, "top_k": 40, "min_p": 0.1, "seed": 3, "stop": ["\n"],
               "repeat_penalty": 1.1, "presence_penalty": 0.2, "frequency_penalty": 0.3, "top_p": 0.9,
               "num_ctx": 2048, "num_thread": 4, "mirostat": 2, "not_an_option": "x"}  # fmt: skip
    assert sampling_fields(options, 4096) == {
        "max_tokens": 8, "temperature": 0.5, "top_k": 40, "min_p": 0.1, "seed": 3, "stop": ["\n"],
        "repeat_penalty": 1.1, "presence_penalty": 0.2, "frequency_penalty": 0.3, "top_p": 0.9,
    }  # fmt: skip
    assert sampling_fields({"num_predict": -1}, None) == {}
    assert sampling_fields({"num_predict": 10**12}, 4096) == {"max_tokens": 4096}  # where Ollama's would stop too
    for bad in ({"seed": 1.5}, {"top_k": True}, {"stop": [1]}, {"num_ctx": 8192}, {"num_predict": -3},
                {"num_predict": 0}):  # fmt: skip
        with pytest.raises(BadRequest):
            sampling_fields(bad, 4096)


def test_conversations_images_and_generate_written_for_the_core() -> None:
    request = chat_request({"model": "m:latest", "messages": [
        {"role": "user", "content": "Look", "images": [PNG]},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_name": "f", "content": "42"},
    ], "format": "json", "stream": False}, 4096)  # fmt: skip
    user, assistant, tool = request.payload["messages"]
    assert request.model == "m" and not request.stream and request.payload["stream"] is True
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR"), user
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert request.payload["response_format"] == {"type": "json_object"}
    calls = [{"function": {"name": "f", "arguments": {}}}, {"function": {"name": "g", "arguments": "{}"}}]
    turns = chat_request({"model": "m", "messages": [
        {"role": "assistant", "tool_calls": calls[:1]}, {"role": "tool", "tool_name": "f", "content": "1"},
        {"role": "assistant", "tool_calls": calls}, {"role": "tool", "tool_name": "g", "content": "2"},
        {"role": "tool", "content": "3"},
    ]}, None).payload["messages"]  # fmt: skip
    ids = [call["id"] for turn in turns if "tool_calls" in turn for call in turn["tool_calls"]]
    assert len(set(ids)) == 3, ids
    assert [turn.get("tool_call_id") for turn in turns if turn["role"] == "tool"] == [ids[0], ids[2], ids[2]]

    raw = generate_request({"model": "m", "prompt": "def f(", "suffix": "return 1", "system": "x"}, 4096)
    assert raw.path == "/v1/completions" and raw.payload["suffix"] == "return 1" and "messages" not in raw.payload
    assert raw.payload["max_tokens"] == 4096, "no limit, as Ollama's default: llama-cpp-python's would be 16"
    templated = generate_request({"model": "m", "prompt": "Hi", "system": "Be brief."}, None)
    assert templated.path == "/v1/chat/completions"
    assert [m["role"] for m in templated.payload["messages"]] == ["system", "user"]
    assert generate_request({"model": "m"}, None).load_only and chat_request({"model": "m"}, None).load_only
