"""Ollama's /api/chat and /api/generate on the real service (the bundled model on llama-cpp-python, and once on
llama-server), driven by the official `ollama` client: streamed and not, the counts and durations it reads, `format`,
`raw`, tools in the conversation, images refused by a text-only model with the core's sentence."""

from __future__ import annotations

import json

import ollama
import pytest

from tests.app.service.dialects.ollama_support import MODEL, ollama_client
from tests.support.service import RunningService, StartService
from tests.support.waiting import wait_for

HI = [{"role": "user", "content": "Hi"}]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="


def check_done(last: ollama.ChatResponse | ollama.GenerateResponse, most: int) -> None:
    """The last object of an answer: done, with a reason, at most `most` tokens, every duration measured."""
    assert last.done is True and last.done_reason in ("stop", "length"), last
    assert last.eval_count is not None and 0 < last.eval_count <= most, last
    assert last.prompt_eval_count is not None and last.prompt_eval_count > 0, last
    assert last.total_duration and last.prompt_eval_duration and last.eval_duration, last
    assert last.total_duration >= last.prompt_eval_duration + last.eval_duration, last
    assert last.load_duration is not None and last.load_duration >= 0, last


def check_chat_and_generate(client: ollama.Client) -> None:
    whole = client.chat(model=MODEL, messages=HI, stream=False, options={"num_predict": 4})
    assert whole.message.role == "assistant" and whole.message.content, whole
    check_done(whole, 4)

    pieces = list(client.chat(model=MODEL, messages=HI, stream=True, options={"num_predict": 5, "seed": 1}))
    assert all(not piece.done for piece in pieces[:-1]) and len(pieces) >= 2, pieces
    assert "".join(piece.message.content or "" for piece in pieces), pieces
    check_done(pieces[-1], 5)
    assert pieces[-1].message.content == ""

    generated = client.generate(model=MODEL, prompt="Once upon a time", system="Be brief.", options={"num_predict": 3})
    assert generated.response, generated
    check_done(generated, 3)

    streamed = list(client.generate(model=MODEL, prompt="Once upon a time", stream=True, options={"num_predict": 4}))
    assert "".join(piece.response or "" for piece in streamed) and streamed[-1].response == "", streamed
    check_done(streamed[-1], 4)


def test_chat_and_generate_streamed_and_whole(service: RunningService) -> None:
    with ollama_client(service) as client:
        check_chat_and_generate(client)
        check_raw_and_format(client)


def check_raw_and_format(client: ollama.Client) -> None:
    raw = client.generate(model=MODEL, prompt="The sky is", raw=True, options={"num_predict": 3, "temperature": 0})
    assert raw.response and raw.done_reason == "length", raw
    check_done(raw, 3)

    # The grammar holds the answer to JSON; a schema to its shape.
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    shaped = client.chat(model=MODEL, messages=HI, format=schema, options={"num_predict": 40, "temperature": 0})
    assert shaped.done_reason == "stop" and isinstance(json.loads(shaped.message.content or "")["ok"], bool), shaped
    loose = client.chat(model=MODEL, messages=HI, format="json", options={"num_predict": 60, "temperature": 0})
    assert loose.done_reason == "stop" and isinstance(json.loads(loose.message.content or ""), dict), loose


def test_tools_and_images_in_the_conversation(service: RunningService) -> None:
    """A tool call the assistant made and the tool's answer go to the model in OpenAI's words (arguments a JSON
    string, the answer tied to its call); an image for a text-only model is the core's 400, passed on."""
    with ollama_client(service) as client:
        check_tools_and_images(client)


def check_tools_and_images(client: ollama.Client) -> None:
    tool = {"type": "function", "function": {"name": "weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip
    conversation = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather",
                                                                            "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "weather", "content": "Sunny, 21 C"},
    ]  # fmt: skip
    answered = client.chat(model=MODEL, messages=conversation, tools=[tool], options={"num_predict": 4})
    assert answered.done and (answered.message.content or answered.message.tool_calls), answered

    with pytest.raises(ollama.ResponseError) as raised:
        client.chat(model=MODEL, messages=[{"role": "user", "content": "What is it?", "images": [PNG]}])
    assert raised.value.status_code == 400 and "image" in raised.value.error.lower(), raised.value


def test_chat_and_generate_on_llama_server(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(parallel=1)
    with ollama_client(service) as client:
        whole = client.chat(model=MODEL, messages=HI, options={"num_predict": 4})
        streamed = list(
            client.generate(model=MODEL, prompt="Once upon a time", stream=True, options={"num_predict": 4})
        )
    assert whole.message.content, whole
    check_done(whole, 4)
    assert "".join(piece.response or "" for piece in streamed), streamed
    check_done(streamed[-1], 4)


def test_a_client_that_leaves_midway_is_cancelled_upstream(service: RunningService) -> None:
    """Ollama's client leaving a long stream: the core sees it go (499 in the request log, the engine freed), and
    the next request is answered."""
    with ollama_client(service) as client:
        stream = client.generate(model=MODEL, prompt="A long story:", stream=True, options={"num_predict": 3000})
        assert [piece.response for piece, _ in zip(stream, range(3), strict=False)], "pieces came"
        stream.close()  # the generator closes the response, and its connection
        wait_for(lambda: service.model()["running_requests"] == 0, 10, "no running request")
        answer = client.chat(model=MODEL, messages=HI, options={"num_predict": 2})
    assert answer.message.content, answer
    statuses = [(r["route"], r["status"]) for r in service.client.requests(10)]
    assert [status for _, status in statuses[-2:]] == [499, 200], statuses
    assert "Traceback" not in service.output(), service.output()[-3000:]
