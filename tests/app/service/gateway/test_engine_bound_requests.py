"""Requests that pass for OpenAI's API, or are malformed in ways the engine notices before the gateway did, sent
to a real service on the bundled model (llama-cpp-python, and llama-server where it fails otherwise): each gets an
answer or a clear 400, never the engine's 500 with its traceback."""

from __future__ import annotations

import json
from typing import Any

import httpx

from app.hub.library import BUNDLED_ID
from tests.support.service import RunningService, StartService

HI = [{"role": "user", "content": "hi"}]


def post(service: RunningService, path: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=service.url, timeout=60, trust_env=False) as v1:
        return v1.post(path, json=body, headers={"Authorization": f"Bearer {service.api_key}"})


def test_null_fields_mean_the_default(service: RunningService) -> None:
    """OpenAI's clients send null for a field left unset; llama-cpp-python refused these with a 500."""
    nulls = dict.fromkeys(
        ("temperature", "top_p", "top_k", "min_p", "stream", "presence_penalty", "frequency_penalty",
         "repeat_penalty", "seed", "stop", "user"),
    )  # fmt: skip
    chat = post(service, "/chat/completions", {"model": BUNDLED_ID, "messages": HI, "max_tokens": 2, **nulls})
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["role"] == "assistant"
    body = {"model": BUNDLED_ID, "prompt": "hi", "max_tokens": 2, "echo": None, "suffix": None, **nulls}
    completion = post(service, "/completions", body)
    assert completion.status_code == 200, completion.text
    assert "Traceback" not in service.output()


def refused(answer: httpx.Response, param: str, words: str) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param), answer.text
    assert words in error["message"] and "Traceback" not in error["message"], answer.text


def test_logit_bias_must_map_token_ids_to_biases(service: RunningService) -> None:
    for bias in ({"x": 1}, {"5": "y"}, {"-1": 1}, {"5": 101}):
        answer = post(service, "/chat/completions", {"model": BUNDLED_ID, "messages": HI, "logit_bias": bias})
        refused(answer, "logit_bias", "`logit_bias` must be an object of token ids to numbers from -100 to 100")
    body = {"model": BUNDLED_ID, "prompt": "hi", "max_tokens": 2, "logit_bias": {"0": -100, "2": 100}}
    assert post(service, "/completions", body).status_code == 200
    assert "Traceback" not in service.output()


def test_tools_and_messages_are_checked_as_openai_does(service: RunningService) -> None:
    chat = {"model": BUNDLED_ID, "messages": HI, "max_tokens": 2}
    for tools in ([{}], [5], [{"type": "function", "function": {}}]):
        refused(
            post(service, "/chat/completions", {**chat, "tools": tools}), "tools[0]", "`tools[0]` must be an object"
        )
    for choice in ("sometimes", {}, {"type": "function"}):
        refused(post(service, "/chat/completions", {**chat, "tool_choice": choice}), "tool_choice",
                '`tool_choice` must be "none", "auto", "required"')  # fmt: skip
    for messages, param, words in [
        ([{"role": "tool", "content": "42"}], "messages[0].tool_call_id", "must be a string"),
        ([{"role": "user"}], "messages[0].content", "is required for a user message"),
        ([*HI, {"role": "system", "content": None}], "messages[1].content", "is required for a system message"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text", "must be a string"),
    ]:
        answer = post(service, "/chat/completions", {**chat, "messages": messages})
        refused(answer, param, f"`{param}` {words}")
    weather = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
    answer = post(service, "/chat/completions", {**chat, "tools": [weather], "tool_choice": "auto"})
    assert answer.status_code == 200, answer.text
    assert "Traceback" not in service.output()


CALL = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}


def asked(*calls: Any) -> list[dict[str, Any]]:
    """A conversation whose assistant turn made `calls`, answered by a tool message."""
    return [*HI, {"role": "assistant", "content": None, "tool_calls": list(calls)},
            {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 21 C."}]  # fmt: skip


def check_names_and_tool_calls(service: RunningService) -> None:
    """llama-server answered a 500 "Failed to parse messages" to each of these, llama-cpp-python to the tool calls."""
    chat = {"model": BUNDLED_ID, "max_tokens": 2}
    function = CALL["function"]
    for messages, param, words in [
        ([{**HI[0], "name": 5}], "messages[0].name", "must be a string"),
        ([{**HI[0], "tool_calls": [CALL]}], "messages[0].tool_calls", "are only for assistant messages"),
        (asked(5), "messages[1].tool_calls[0]", 'must be an object {"id": ..., "type": "function"'),
        ([*HI, {"role": "assistant", "content": None, "tool_calls": 5}], "messages[1].tool_calls", "must be an array"),
        (asked({**CALL, "id": None}), "messages[1].tool_calls[0].id", "must be a string"),
        (asked({**CALL, "type": "custom"}), "messages[1].tool_calls[0].type", 'must be "function"'),
        (asked({**CALL, "function": "weather"}), "messages[1].tool_calls[0].function", "must be an object"),
        (asked({**CALL, "function": {"arguments": "{}"}}), "messages[1].tool_calls[0].function.name",
         "must be a non-empty string"),
        (asked({**CALL, "function": {**function, "arguments": {"city": "Paris"}}}),
         "messages[1].tool_calls[0].function.arguments", "must be a string: the arguments as JSON text"),
    ]:  # fmt: skip
        answer = post(service, "/chat/completions", {**chat, "messages": messages})
        refused(answer, param, f"`{param}` {words}")
    named = [{**HI[0], "name": "ann"}, *asked(CALL)[1:]]
    answer = post(service, "/chat/completions", {**chat, "messages": named})
    assert answer.status_code == 200, answer.text
    # null is "left out": an assistant message as the openai SDK writes one it read back (model_dump)
    read_back = {"role": "assistant", "content": "Hello!", "refusal": None, "audio": None, "function_call": None,
                 "tool_calls": None}  # fmt: skip
    again = [{**HI[0], "name": None}, read_back, {"role": "user", "content": "And again?"}]
    answer = post(service, "/chat/completions", {**chat, "messages": again})
    assert answer.status_code == 200, answer.text
    assert "Traceback" not in service.output()


def test_a_message_name_and_tool_calls_are_checked_as_openai_does(service: RunningService) -> None:
    check_names_and_tool_calls(service)


def test_a_message_name_and_tool_calls_are_checked_before_llama_server(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(1)
    check_names_and_tool_calls(service)


def test_an_empty_prompt_or_input_is_refused(service: RunningService) -> None:
    """llama-cpp-python answered these with a 500 whose message was empty, or "llama_decode returned -1"."""
    completion = post(service, "/completions", {"model": BUNDLED_ID, "prompt": "", "max_tokens": 2})
    refused(completion, "prompt", "`prompt` must be a non-empty string")
    for text in ("", ["a", ""]):
        refused(post(service, "/embeddings", {"model": BUNDLED_ID, "input": text}), "input",
                "`input` must be a non-empty string, a list of 1 to 2048 non-empty strings, or token ids")  # fmt: skip
    assert post(service, "/embeddings", {"model": BUNDLED_ID, "input": ["a", "b"]}).status_code == 200
    assert "Traceback" not in service.output()


LONE_SURROGATES = [  # a JSON escape of half a surrogate pair, which neither engine can encode: both answered 500
    ("/chat/completions", {"messages": [{"role": "user", "content": "hi \ud800"}]}, "messages[0].content"),
    ("/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
     "messages[0].content[0].text"),
    ("/chat/completions", {"messages": HI, "stop": ["x", "\udc00"]}, "stop[1]"),
    ("/completions", {"prompt": "\ud800 there"}, "prompt"),
    ("/completions", {"prompt": "hi", "stop": "\udbff"}, "stop"),
    ("/embeddings", {"input": ["ok", "\ud800"]}, "input[1]"),
]  # fmt: skip


def post_escaped(service: RunningService, path: str, body: dict[str, Any]) -> httpx.Response:
    """`body` sent as json.dumps writes it: a lone surrogate as its `\\ud800` escape (httpx's json= cannot)."""
    with httpx.Client(base_url=service.url, timeout=60, trust_env=False) as v1:
        headers = {"Authorization": f"Bearer {service.api_key}", "Content-Type": "application/json"}
        return v1.post(path, content=json.dumps(body).encode(), headers=headers)


def check_lone_surrogates(service: RunningService) -> None:
    for path, fields, param in LONE_SURROGATES:
        for stream in (False, True) if path != "/embeddings" else (False,):
            body = {"model": BUNDLED_ID, "max_tokens": 2, **fields, **({"stream": True} if stream else {})}
            if path == "/embeddings":
                del body["max_tokens"]
            answer = post_escaped(service, path, body)
            refused(answer, param, f"`{param}` holds a lone UTF-16 surrogate")
    paired = {"model": BUNDLED_ID, "max_tokens": 2, "messages": [{"role": "user", "content": "\U0001f600"}]}
    assert post_escaped(service, "/chat/completions", paired).status_code == 200  # an emoji: two escapes, one char
    assert "Traceback" not in service.output()


def test_a_lone_surrogate_is_a_400_naming_the_field(service: RunningService) -> None:
    check_lone_surrogates(service)


def test_a_lone_surrogate_is_a_400_naming_the_field_before_llama_server(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(1)
    check_lone_surrogates(service)


def test_a_tool_function_is_checked_as_openai_does(service: RunningService) -> None:
    """A function's parameters that were no object, or a description that was no string, were llama-cpp-python's
    validation 500, its traceback in the message."""
    chat = {"model": BUNDLED_ID, "messages": HI, "max_tokens": 2}
    for field, value, words in [
        ("parameters", 5, "an object"), ("parameters", [], "an object"), ("description", 5, "a string"),
        ("strict", "yes", "true or false"),
    ]:  # fmt: skip
        tools = [{"type": "function", "function": {"name": "f", field: value}}]
        param = f"tools[0].function.{field}"
        refused(post(service, "/chat/completions", {**chat, "tools": tools}), param, f"`{param}` must be {words}")
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]
    assert post(service, "/chat/completions", {**chat, "tools": tools}).status_code == 200
    assert "Traceback" not in service.output()
