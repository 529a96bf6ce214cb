"""The same OpenAI features whichever GGUF engine serves the bundled model: the real service, the real engines
(llama-cpp-python and the llama-server test build) and the official `openai` client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import RunningService, StartService, start_service_process, stop_service_process

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def structured_answer(service: RunningService) -> object:
    """A chat completion held to PERSON by `response_format` as OpenAI writes it, parsed."""
    reply = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Describe a person: name and age, as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}},
        max_tokens=200, temperature=0,
    )  # fmt: skip
    assert reply.choices[0].finish_reason == "stop", reply
    content = reply.choices[0].message.content
    assert content is not None
    return json.loads(content)


def check_json_schema_and_token_limit(service: RunningService) -> None:
    jsonschema.validate(structured_answer(service), PERSON)
    limited = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Write a long story about the sea."}],
        max_completion_tokens=5, temperature=0,  # sampled, the model may end its turn within 5 tokens
    )  # fmt: skip
    assert limited.usage is not None and limited.usage.completion_tokens <= 5
    assert limited.choices[0].finish_reason == "length"


def check_messages_as_openai_writes_them(service: RunningService) -> None:
    """Messages OpenAI takes that a model's chat template may not: answered as OpenAI would, or refused saying why."""
    client = service.openai_client()
    in_parts: Any = [
        {"role": "system", "content": [{"type": "text", "text": "Answer briefly."}]},
        {"role": "user", "content": [{"type": "text", "text": "Say"}, {"type": "text", "text": "hello."}]},
    ]
    joined: Any = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Say\nhello."}]
    reply = client.chat.completions.create(model=BUNDLED_ID, messages=in_parts, max_tokens=4, temperature=0)
    same = client.chat.completions.create(model=BUNDLED_ID, messages=joined, max_tokens=4, temperature=0)
    assert reply.choices[0].message.content and reply.usage is not None and same.usage is not None
    assert reply.usage.prompt_tokens == same.usage.prompt_tokens  # the text parts read as one text, one per line
    stream = client.chat.completions.create(model=BUNDLED_ID, messages=in_parts, max_tokens=4, stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    asked: Any = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    with pytest.raises(openai.BadRequestError, match="take text only") as refused:
        client.chat.completions.create(model=BUNDLED_ID, messages=asked, max_tokens=4)
    assert "`messages[0].content[1]` is of type `image_url`" in refused.value.message
    assert refused.value.param == "messages[0].content[1]"
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    tool_turn: Any = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 21 C."},
    ]
    answered = client.chat.completions.create(model=BUNDLED_ID, messages=tool_turn, max_tokens=4)
    assert answered.choices[0].message.role == "assistant"
    developer = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "developer", "content": "Answer briefly."}, *joined[1:]], max_tokens=4,
        temperature=0,
    )  # fmt: skip
    assert developer.usage is not None and developer.usage.prompt_tokens == same.usage.prompt_tokens  # as `system`


def test_llama_cpp_python_json_schema_and_logprobs_refused_naming_llama_server(paths: AppPaths,
                                                                               tmp_path: Path) -> None:  # fmt: skip
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    try:
        assert service.client.models()[0]["engine"] == "llama-cpp-python"
        check_json_schema_and_token_limit(service)
        for ask in ({"logprobs": True}, {"logprobs": True, "top_logprobs": 2}):
            with pytest.raises(openai.BadRequestError) as refused:
                service.openai_client().chat.completions.create(
                    model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, **ask  # type: ignore[arg-type]
                )  # fmt: skip
            assert "llama-cpp-python" in refused.value.message and "llama-server" in refused.value.message
        with pytest.raises(openai.BadRequestError, match="llama-server"):
            service.openai_client().completions.create(model=BUNDLED_ID, prompt="The sky is", max_tokens=4, logprobs=2)
        # The engine is still serving after the refusals.
        still = service.openai_client().chat.completions.create(
            model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
        )
        assert still.choices[0].message.content
    finally:
        stop_service_process(service)


def test_llama_server_json_schema_and_logprobs(llama_server_service: StartService) -> None:
    service = llama_server_service()
    assert service.start_on_llama_server(2)["engine"] == "llama-server"
    check_json_schema_and_token_limit(service)
    reply = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=6, logprobs=True,
        top_logprobs=3, temperature=0,
    )  # fmt: skip
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content and reply.usage is not None
    assert len(logprobs.content) == reply.usage.completion_tokens
    for token in logprobs.content:
        assert token.logprob <= 0 and len(token.top_logprobs) == 3
        assert max(top.logprob for top in token.top_logprobs) >= token.logprob
    completion = service.openai_client().completions.create(
        model=BUNDLED_ID,
        prompt="The sky is",
        max_tokens=4,
        logprobs=2,
        temperature=0,  # 4 tokens, not an early end
    )
    # llama-server answers legacy completions in the chat shape (`content`), not `tokens` / `token_logprobs`:
    # the feature table in docs/ENGINES.md ("OpenAI features by engine") says so; the gateway forwards the answer's
    # bytes as they come.
    answered = completion.choices[0].logprobs
    assert answered is not None and answered.model_extra is not None
    assert [entry["logprob"] <= 0 for entry in answered.model_extra["content"]] == [True] * 4


def test_llama_cpp_python_takes_messages_as_openai_writes_them(service: RunningService) -> None:
    """llama-cpp-python gave the messages to SmolLM2's chat template as they came: a 500 from the template."""
    check_messages_as_openai_writes_them(service)


def test_llama_server_takes_messages_as_openai_writes_them(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(2)
    check_messages_as_openai_writes_them(service)
    # llama-server's own 500 on messages in parts (its `reasoning_content`, not OpenAI's, so left to it, given a
    # number): the template renders them as llama-server gave them to it, so the engine's error is passed on; the
    # parts as they came were blamed on it.
    reasoned: Any = [{"role": "user", "content": [{"type": "text", "text": "Hi"}], "reasoning_content": 5}]
    with pytest.raises(openai.InternalServerError) as failed:
        service.openai_client().chat.completions.create(model=BUNDLED_ID, messages=reasoned, max_tokens=4)
    assert "Failed to parse messages" in failed.value.message, failed.value.message
