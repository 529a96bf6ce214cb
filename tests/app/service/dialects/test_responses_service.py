"""OpenAI's Responses API against the real service on the bundled model, driven by the official `openai` client:
answers, the event stream, structured output, a function tool round trip, stored responses and continuations."""

from __future__ import annotations

import json
import stat
from typing import Any

import openai
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import RunningService, StartService
from tests.support.waiting import wait_for

TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]
SCHEMA = {
    "type": "object",
    "properties": {"sunny": {"type": "boolean"}},
    "required": ["sunny"],
    "additionalProperties": False,
}
WEATHER: Any = {
    "type": "function",
    "name": "weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def check_create(client: openai.OpenAI) -> None:
    """A string input answered, within max_output_tokens, and incomplete when cut."""
    reply = client.responses.create(
        model=BUNDLED_ID, input="Say hello.", max_output_tokens=4, metadata={"a": "b"}, temperature=0
    )
    assert reply.id.startswith("resp_") and reply.object == "response" and reply.model == BUNDLED_ID
    assert reply.output_text
    assert reply.usage is not None and reply.usage.input_tokens > 0
    assert reply.usage.output_tokens == 4  # its greedy answer is longer: cut at the limit
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    assert reply.metadata == {"a": "b"} and reply.max_output_tokens == 4
    assert reply.status == "incomplete", reply
    assert reply.incomplete_details is not None and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.output[0].status == "incomplete"  # type: ignore[union-attr]


def check_stream(client: openai.OpenAI) -> None:
    """The documented events in order, numbered; the deltas join to the text of the final response."""
    events = list(
        client.responses.create(
            model=BUNDLED_ID, input="Tell me a story.", max_output_tokens=6, stream=True, temperature=0
        )
    )
    kinds = [event.type for event in events]
    deduplicated = [kind for index, kind in enumerate(kinds[:-1]) if index == 0 or kind != kinds[index - 1]]
    assert deduplicated == TEXT_EVENTS, kinds
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert deltas and deltas == final.output_text
    assert final.usage is not None and final.usage.input_tokens > 0 and final.usage.output_tokens == 6
    assert kinds[-1] == "response.incomplete" and final.status == "incomplete"
    assert final.id == events[0].response.id  # type: ignore[union-attr]


def test_create_stream_store_and_continue(service: RunningService, paths: AppPaths) -> None:
    client = service.openai_client()
    check_create(client)
    check_stream(client)
    first = client.responses.create(
        model=BUNDLED_ID,
        instructions="Answer in one word.",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Hi there."}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
            {"type": "message", "role": "user", "content": "Name a colour."},
        ],
        max_output_tokens=8,
    )
    assert first.output_text and first.instructions == "Answer in one word."
    assert first.usage is not None and first.usage.input_tokens > 10
    second = client.responses.create(
        model=BUNDLED_ID, previous_response_id=first.id, input="Another?", max_output_tokens=4
    )
    assert second.output_text and second.previous_response_id == first.id
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens  # the history came too
    listed = client.responses.input_items.list(first.id, order="asc")
    assert [(item.type, item.role) for item in listed.data] == [  # type: ignore[union-attr]
        ("message", "user"), ("message", "assistant"), ("message", "user"),
    ]  # fmt: skip
    assert listed.data[2].content[0].text == "Name a colour."  # type: ignore[union-attr]
    paged = list(client.responses.input_items.list(first.id, limit=2))  # two pages, newest first
    assert [item.id for item in paged] == [item.id for item in reversed(listed.data)]
    kept = client.responses.retrieve(first.id)
    assert kept.id == first.id and kept.output_text == first.output_text
    deleted = client.responses.delete(first.id)
    assert deleted is None  # the client returns nothing; the body is checked below
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model=BUNDLED_ID, previous_response_id=first.id, input="Hi", max_output_tokens=2)
    assert missing.value.code == "previous_response_not_found"
    unstored = client.responses.create(model=BUNDLED_ID, input="Hi", max_output_tokens=2, store=False)
    assert unstored.output_text and unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    gone = client.delete(f"/responses/{second.id}", cast_to=object)
    assert gone == {"id": second.id, "object": "response", "deleted": True}
    kept_files = list(paths.responses_db.parent.glob(paths.responses_db.name + "*"))  # with SQLite's -wal and -shm
    assert paths.responses_db in kept_files
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in kept_files} == {
        path.name: 0o600 for path in kept_files
    }


def test_structured_output_and_function_tools(service: RunningService) -> None:
    client = service.openai_client()
    schema_format: Any = {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}
    with client.responses.stream(
        model=BUNDLED_ID, input="Is it sunny? Answer in JSON.", text={"format": schema_format}, max_output_tokens=32
    ) as stream:
        final = stream.get_final_response()
    assert final.status == "completed", final
    assert isinstance(json.loads(final.output_text)["sunny"], bool)
    assert final.text is not None and final.text.format.type == "json_schema"
    as_object = client.responses.create(
        model=BUNDLED_ID, input="A JSON object, please.", text={"format": {"type": "json_object"}}, max_output_tokens=24
    )
    if as_object.status == "completed":
        assert isinstance(json.loads(as_object.output_text), dict)
    asked: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = client.responses.create(
        model=BUNDLED_ID, input=asked, tools=[WEATHER], tool_choice={"type": "function", "name": "weather"},
        max_output_tokens=48,
    )  # fmt: skip
    calls = [item for item in called.output if item.type == "function_call"]
    assert calls and calls[0].name == "weather", called.output
    assert isinstance(json.loads(calls[0].arguments), dict)
    answered = client.responses.create(
        model=BUNDLED_ID, tools=[WEATHER], max_output_tokens=8,
        input=[*asked, calls[0].model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C."}],
    )  # fmt: skip
    assert answered.output_text or any(item.type == "function_call" for item in answered.output)
    continued = client.responses.create(  # the call from the stored response, its output from this input
        model=BUNDLED_ID, tools=[WEATHER], max_output_tokens=8, previous_response_id=called.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C."}],
    )  # fmt: skip
    assert continued.output_text or any(item.type == "function_call" for item in continued.output)
    assert continued.usage is not None and called.usage is not None
    assert continued.usage.input_tokens > called.usage.input_tokens
    events = list(client.responses.create(
        model=BUNDLED_ID, input=asked, tools=[WEATHER], tool_choice={"type": "function", "name": "weather"},
        max_output_tokens=48, stream=True,
    ))  # fmt: skip
    kinds = [event.type for event in events]
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    done = next(event for event in events if event.type == "response.function_call_arguments.done")
    final_calls = [item for item in events[-1].response.output if item.type == "function_call"]  # type: ignore[union-attr]
    assert final_calls and final_calls[0].arguments == done.arguments  # type: ignore[union-attr]


def test_llama_server_create_and_stream(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(2)
    client = service.openai_client()
    check_create(client)
    check_stream(client)


def test_a_client_leaving_mid_stream_cancels_the_answer(service: RunningService) -> None:
    client = service.openai_client()
    stream = client.responses.create(model=BUNDLED_ID, input="Tell me a long story.", max_output_tokens=400,
                                     stream=True)  # fmt: skip
    events = iter(stream)
    created = next(events)
    assert created.type == "response.created"
    assert next(event for event in events if event.type == "response.output_text.delta").delta
    stream.close()
    record = wait_for(lambda: [r for r in service.client.requests(limit=5) if r["status"] == 499], 30,
                      "the request logged as the client's leaving")[0]  # fmt: skip
    assert record["completion_tokens"] is None or record["completion_tokens"] < 400
    with pytest.raises(openai.NotFoundError):  # an answer cut short is not kept to continue from
        client.responses.retrieve(created.response.id)  # type: ignore[union-attr]
    after = client.responses.create(model=BUNDLED_ID, input="Hi", max_output_tokens=2)
    assert after.output_text
