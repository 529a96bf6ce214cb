"""Tool calling against the real service on the bundled model, on llama-cpp-python and on llama-server's test build,
with the official `openai` client and langchain-openai: `required` and a named function return a valid call to an
offered tool (streamed too), `none` returns text, `auto` returns the call the model writes, `parallel_tool_calls`
false keeps one, and a tool result goes back into the conversation."""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from app.hub.library import BUNDLED_ID
from tests.support.service import RunningService, StartService


def tool(name: str, field: str, values: list[str]) -> dict[str, Any]:
    """A tool whose one argument is one of a few short values: the tiny model's strings would run past max_tokens."""
    schema = {"type": "object", "properties": {field: {"type": "string", "enum": values}}, "required": [field]}
    return {"type": "function", "function": {"name": name, "description": f"The {name}.", "parameters": schema}}


WEATHER, CLOCK = tool("weather", "city", ["Paris", "Rome", "Oslo"]), tool("clock", "zone", ["UTC", "CET"])
TOOLS: Any = [WEATHER, CLOCK]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK: Any = [{"role": "user", "content": "Weather in Paris?"}]
MAX_TOKENS = 48


def written(*cities: str) -> str:
    return "\n".join(
        f'<tool_call>{{"name": "weather", "arguments": {{"city": "{city}"}}}}</tool_call>' for city in cities
    )


# Few-shot conversations after which the bundled model writes calls in the Hermes form (at temperature 0)
ONE_CALL: Any = [ASK[0], {"role": "assistant", "content": written("Paris")}, ASK[0]]
TWO: Any = {"role": "user", "content": "Weather in Oslo and Rome?"}
TWO_CALLS: Any = [TWO, {"role": "assistant", "content": written("Oslo", "Rome")}, TWO]


def valid_call(call: Any, names: set[str]) -> dict[str, Any]:
    """The call's arguments, checked against its tool's schema."""
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in names
    arguments: dict[str, Any] = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return arguments


def check_forced(service: RunningService) -> None:
    client = service.openai_client()
    reply = client.chat.completions.create(
        model=BUNDLED_ID, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=MAX_TOKENS
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    valid_call(choice.message.tool_calls[0], {"weather", "clock"})
    assert reply.usage is not None and reply.usage.completion_tokens <= MAX_TOKENS

    with client.chat.completions.stream(
        model=BUNDLED_ID, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=MAX_TOKENS,
        stream_options={"include_usage": True},
    ) as stream:  # fmt: skip
        pieces = [event.arguments_delta for event in stream if event.type == "tool_calls.function.arguments.delta"]
        completion = stream.get_final_completion()
    final = completion.choices[0]
    assert completion.usage is not None and 0 < completion.usage.completion_tokens <= MAX_TOKENS
    assert final.finish_reason == "tool_calls" and final.message.tool_calls is not None
    assert len(final.message.tool_calls) == 1
    valid_call(final.message.tool_calls[0], {"weather", "clock"})
    assert len(pieces) > 1 and "".join(pieces) == final.message.tool_calls[0].function.arguments

    named = client.chat.completions.create(
        model=BUNDLED_ID, messages=ASK, tools=TOOLS, max_tokens=MAX_TOKENS,
        tool_choice={"type": "function", "function": {"name": "clock"}},
    )  # fmt: skip
    assert named.choices[0].message.tool_calls is not None
    assert valid_call(named.choices[0].message.tool_calls[0], {"clock"})["zone"] in ("UTC", "CET")
    legacy = client.chat.completions.create(
        model=BUNDLED_ID, messages=ASK, functions=[WEATHER["function"]], function_call={"name": "weather"},
        max_tokens=MAX_TOKENS,
    )  # fmt: skip
    called = legacy.choices[0].message.function_call
    assert legacy.choices[0].finish_reason == "function_call" and called is not None and called.name == "weather"
    jsonschema.validate(json.loads(called.arguments), SCHEMAS["weather"])
    # Measured on the gateway's one path: the stream's record counts what the engine generated
    streamed = [record for record in service.client.requests(limit=10) if record["stream"]]
    assert [record["status"] for record in streamed] == [200]
    assert streamed[0]["ttft_s"] is not None and streamed[0]["completion_tokens"]


def check_chosen(service: RunningService) -> None:
    client = service.openai_client()
    none = client.chat.completions.create(
        model=BUNDLED_ID, messages=ONE_CALL, tools=TOOLS, tool_choice="none", max_tokens=24, temperature=0
    )
    assert none.choices[0].message.content and not none.choices[0].message.tool_calls

    auto = client.chat.completions.create(model=BUNDLED_ID, messages=ONE_CALL, tools=TOOLS, max_tokens=MAX_TOKENS,
                                          temperature=0)  # fmt: skip
    assert auto.choices[0].finish_reason == "tool_calls" and auto.choices[0].message.tool_calls is not None
    assert [valid_call(call, {"weather"}) for call in auto.choices[0].message.tool_calls] == [{"city": "Paris"}]
    with client.chat.completions.stream(
        model=BUNDLED_ID, messages=ONE_CALL, tools=TOOLS, tool_choice="auto", max_tokens=MAX_TOKENS, temperature=0
    ) as stream:
        streamed = stream.get_final_completion().choices[0].message.tool_calls
    assert streamed is not None and [valid_call(call, {"weather"}) for call in streamed] == [{"city": "Paris"}]

    # Text in an answer that may hold calls still streams, and max_tokens holds
    chunks = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hello."}], tools=TOOLS, max_tokens=8,
        stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    read = list(chunks)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in read if chunk.choices)
    assert text.strip() and read[-1].usage is not None and read[-1].usage.completion_tokens <= 8

    def calls(parallel: bool) -> list[dict[str, Any]]:
        reply = client.chat.completions.create(
            model=BUNDLED_ID, messages=TWO_CALLS, tools=TOOLS, max_tokens=64, temperature=0,
            parallel_tool_calls=parallel,
        )  # fmt: skip
        return [valid_call(call, {"weather"}) for call in reply.choices[0].message.tool_calls or []]

    # The model writes one or two calls here, as its prompt cache holds (greedy decoding on other cached states):
    # that the first call only is kept is checked on recorded text (test_tool_calls.py)
    assert len(calls(parallel=False)) <= 1
    assert len(calls(parallel=True)) >= 1

    # The SDK's own message object goes back as it was read, with the tool's result after it
    message = auto.choices[0].message
    assert message.tool_calls is not None
    result = {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "18 C and sunny"}
    answer = client.chat.completions.create(
        model=BUNDLED_ID,
        messages=[*ONE_CALL, message, result],
        tools=TOOLS,
        max_tokens=16,  # type: ignore[list-item]
    )
    assert answer.choices[0].message.content or answer.choices[0].message.tool_calls


def test_llama_cpp_python_forces_a_call(service: RunningService) -> None:
    check_forced(service)


def test_llama_cpp_python_none_auto_parallel_and_a_result(service: RunningService) -> None:
    check_chosen(service)


def test_llama_server_forces_a_call(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(2)
    check_forced(service)


def test_llama_server_none_auto_parallel_and_a_result(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(2)
    check_chosen(service)


def test_hostile_tool_requests_are_400s(service: RunningService) -> None:
    client = service.openai_client()
    choice: Any = {"type": "function", "function": {"name": "x"}}
    with pytest.raises(openai.BadRequestError, match="not in `tools`") as refused:
        client.chat.completions.create(model=BUNDLED_ID, messages=ASK, tools=TOOLS, tool_choice=choice)
    assert refused.value.body["param"] == "tool_choice"  # type: ignore[index]
    deep: Any = {"type": "object"}
    for _ in range(40):  # past the body's bound of 64 levels (app.bounded_json)
        deep = {"type": "object", "properties": {"a": deep}}
    hostile: list[dict[str, Any]] = [
        {"tools": {"weather": WEATHER}},
        {"tools": [{"type": "function", "function": {"name": 7}}]},
        {"tools": TOOLS, "tool_choice": {"type": "function"}},
        {"tools": TOOLS, "tool_choice": "always"},
        {"tools": TOOLS, "parallel_tool_calls": "yes"},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}], "tool_choice": "required"},
    ]
    for fields in hostile:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=BUNDLED_ID, messages=ASK, max_tokens=4, **fields)
        assert refused.value.body["type"] == "invalid_request_error", fields  # type: ignore[index]


class Weather(BaseModel):
    city: Literal["Paris", "Rome", "Oslo"]


def test_langchain_structured_output_and_bound_tools(service: RunningService) -> None:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model=BUNDLED_ID, base_url=service.url, api_key=service.api_key, max_tokens=MAX_TOKENS,  # type: ignore[arg-type]
                      max_retries=0)  # fmt: skip
    structured = chat.with_structured_output(Weather, method="function_calling").invoke("Weather in Paris?")
    assert isinstance(structured, Weather)
    answer = chat.bind_tools([WEATHER], tool_choice="required", parallel_tool_calls=False).invoke("Weather?")
    assert [call["name"] for call in answer.tool_calls] == ["weather"]  # type: ignore[attr-defined]
    assert answer.tool_calls[0]["args"]["city"] in ("Paris", "Rome", "Oslo")  # type: ignore[attr-defined]
