"""The translation of OpenAI features into each GGUF engine's words, on request bodies (no engine needed here;
tests/app/service/gateway/test_features_engines.py checks the same features through the gateway on the real engines)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.service.gateway.features import FeatureRefused, adapt, has_features
from app.service.gateway.validation import InvalidRequest
from engines.base import Capabilities
from engines.llama_cpp import LlamaCppPythonEngine
from engines.llama_server import LlamaServerEngine

CHAT = "/v1/chat/completions"
SCHEMA = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
LCP = LlamaCppPythonEngine()
SERVER = LlamaServerEngine()


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "x"}], **fields}


def test_json_schema_becomes_a_json_object_with_its_schema_for_llama_cpp_python() -> None:
    payload = body(response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}})
    assert adapt(LCP.name, LCP.capabilities, CHAT, payload)
    assert payload["response_format"] == {"type": "json_object", "schema": SCHEMA}


def test_json_schema_without_a_schema_is_any_json_object() -> None:
    payload = body(response_format={"type": "json_schema", "json_schema": {"name": "anything"}})
    assert adapt(LCP.name, LCP.capabilities, CHAT, payload)
    assert payload["response_format"] == {"type": "json_object"}


def test_llama_server_gets_openais_words_unchanged() -> None:
    payload = body(response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
                   logprobs=True, top_logprobs=3, max_completion_tokens=9)  # fmt: skip
    original = copy.deepcopy(payload)
    assert not adapt(SERVER.name, SERVER.capabilities, CHAT, payload)
    assert payload == original


def test_max_completion_tokens_becomes_max_tokens_for_llama_cpp_python() -> None:
    payload = body(max_completion_tokens=7)
    assert adapt(LCP.name, LCP.capabilities, CHAT, payload)
    assert payload["max_tokens"] == 7 and "max_completion_tokens" not in payload
    both = body(max_tokens=5, max_completion_tokens=7)
    adapt(LCP.name, LCP.capabilities, CHAT, both)
    assert both["max_tokens"] == 5 and "max_completion_tokens" not in both


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        (CHAT, {"logprobs": True}),
        (CHAT, {"logprobs": True, "top_logprobs": 2}),
        (CHAT, {"top_logprobs": 2}),
        ("/v1/completions", {"logprobs": 0}),
    ],
)
def test_logprobs_on_llama_cpp_python_are_refused_naming_llama_server(path: str, fields: dict[str, Any]) -> None:
    payload = body(**fields)
    with pytest.raises(FeatureRefused) as refused:
        adapt(LCP.name, LCP.capabilities, path, payload)
    assert refused.value.param == "logprobs"
    assert "llama-cpp-python" in str(refused.value) and '"engine": "llama-server"' in str(refused.value)
    assert "`modeldeck engines build llama-server`" in str(refused.value)  # no dead end where it is not installed


def test_logprobs_false_is_not_a_request_for_logprobs() -> None:
    payload = body(logprobs=False)
    assert not adapt(LCP.name, LCP.capabilities, CHAT, payload)
    assert payload == body(logprobs=False)


@pytest.mark.parametrize(
    ("response_format", "engine", "says"),
    [
        ({"type": 3}, SERVER, "`response_format.type` must be a string"),
        ({"type": "json_schema"}, SERVER, "`response_format.json_schema` must be an object"),
        ({"type": "json_schema", "json_schema": {"schema": []}}, LCP, "`response_format.json_schema.schema`"),
        ({"type": "yaml"}, LCP, "text, json_object, json_schema for llama-cpp-python"),
    ],
)
def test_malformed_response_formats_get_a_clear_error(
    response_format: dict[str, Any], engine: LlamaServerEngine | LlamaCppPythonEngine, says: str
) -> None:
    payload = body(response_format=response_format)
    original = copy.deepcopy(payload)
    with pytest.raises(InvalidRequest, match=says.replace("(", r"\(")) as error:
        adapt(engine.name, engine.capabilities, CHAT, payload)
    assert error.value.param == "response_format"
    assert payload == original  # nothing lost or half rewritten


def test_other_engines_and_plain_bodies_are_left_alone() -> None:
    assert not has_features(CHAT, body(temperature=0.5, stop=["x"]))
    assert has_features(CHAT, body(response_format={"type": "text"}))
    payload = body(response_format={"type": "structural_tag", "format": {}})  # vLLM's own type
    assert not adapt("vllm", SERVER.capabilities, CHAT, payload)


def parts(*texts: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text} for text in texts]


def test_text_parts_are_joined_for_llama_cpp_python_as_llama_server_joins_them() -> None:
    payload = body(messages=[{"role": "system", "content": parts("Be brief.")},
                             {"role": "user", "content": parts("Say", "hello.")}])  # fmt: skip
    assert has_features(CHAT, payload)
    assert adapt(LCP.name, LCP.capabilities, CHAT, payload)
    assert [message["content"] for message in payload["messages"]] == ["Be brief.", "Say\nhello."]
    untouched = body(messages=[{"role": "user", "content": parts("Say", "hello.")}])
    assert not adapt(SERVER.name, SERVER.capabilities, CHAT, untouched)  # llama-server joins them itself
    assert untouched == body(messages=[{"role": "user", "content": parts("Say", "hello.")}])


@pytest.mark.parametrize("engine", [LCP, SERVER], ids=lambda engine: engine.name)
@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    ],
    ids=lambda part: part["type"],
)
def test_media_parts_are_refused_on_the_gguf_engines(
    engine: LlamaServerEngine | LlamaCppPythonEngine, part: dict[str, Any]
) -> None:
    payload = body(messages=[{"role": "user", "content": "x"}, {"role": "user", "content": [*parts("?"), part]}])
    with pytest.raises(FeatureRefused) as refused:
        adapt(engine.name, engine.capabilities, CHAT, payload)
    assert refused.value.param == "messages[1].content[1]"
    assert str(refused.value).startswith(f"`messages[1].content[1]` is of type `{part['type']}`")
    assert f"served by {engine.name} take text only" in str(refused.value)
    assert not adapt("vllm", Capabilities(max_concurrency=8, stream_usage=True), CHAT, payload)


def test_an_assistants_left_out_content_is_empty_for_llama_cpp_python() -> None:
    call = [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": call},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "tool_calls": call},
    ]
    payload = body(messages=copy.deepcopy(messages))
    assert has_features(CHAT, payload)
    assert adapt(LCP.name, LCP.capabilities, CHAT, payload)
    assert [message["content"] for message in payload["messages"]] == ["Weather?", "", "sunny", ""]
    assert payload["messages"][1]["tool_calls"] == call
    untouched = body(messages=copy.deepcopy(messages))
    assert not adapt(SERVER.name, SERVER.capabilities, CHAT, untouched)
    assert untouched == body(messages=messages)


def test_the_developer_role_is_the_system_role_for_llama_cpp_python() -> None:
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "x"}]
    payload = body(messages=copy.deepcopy(messages))
    assert has_features(CHAT, payload)
    assert adapt(LCP.name, LCP.capabilities, CHAT, payload)
    assert payload["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}]
    untouched = body(messages=copy.deepcopy(messages))
    assert not adapt(SERVER.name, SERVER.capabilities, CHAT, untouched)  # it knows the role
    assert untouched == body(messages=messages)
