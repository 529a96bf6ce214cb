"""Anthropic's Messages API on the endpoint, driven by the official `anthropic` client against the real service on
the bundled model (llama-cpp-python, and llama-server's test build): plain and streamed messages, tools, token
counts and the key. The model is tiny: the tests check that text came and that fields are right, not what it says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from app.hub.library import BUNDLED_ID
from tests.support.service import RunningService, StartService
from tests.support.waiting import wait_for

ASK: Any = [{"role": "user", "content": "Say hello."}]
WEATHER: Any = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
BLOCK_EVENTS = ("content_block_start", "content_block_delta", "content_block_stop")


@pytest.fixture
def clients() -> Iterator[list[anthropic.Anthropic]]:
    made: list[anthropic.Anthropic] = []
    yield made
    for client in made:
        client.close()


def client_of(service: RunningService, made: list[anthropic.Anthropic], key: str | None = None) -> anthropic.Anthropic:
    """Anthropic's client as its users make it: the endpoint's address without /v1, the key sent as x-api-key."""
    base_url = service.url.removesuffix("/v1")
    client = anthropic.Anthropic(base_url=base_url, api_key=key or service.api_key, max_retries=0, timeout=60)
    made.append(client)
    return client


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def check_plain_and_streamed(client: anthropic.Anthropic) -> None:
    """A message, one with a system prompt, and the same streamed, read as Anthropic's client reads them."""
    message = client.messages.create(model=BUNDLED_ID, max_tokens=6, messages=ASK)
    assert message.type == "message" and message.role == "assistant" and message.model == BUNDLED_ID
    assert message.id.startswith("msg_") and text_of(message), message
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 6, message.usage
    assert message.stop_reason == "max_tokens" or message.usage.output_tokens < 6, message
    # SmolLM2's template puts a system prompt of its own where none is sent: a long one shows that this one came.
    long_system = [{"type": "text", "text": "You are terse. " * 30}, {"type": "text", "text": "Answer briefly."}]
    system = client.messages.create(model=BUNDLED_ID, max_tokens=4, system=long_system, messages=ASK)  # type: ignore[arg-type]
    assert text_of(system) and system.usage.input_tokens > message.usage.input_tokens + 60, system.usage

    with client.messages.stream(model=BUNDLED_ID, max_tokens=6, system="You are terse.", messages=ASK) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) and "".join(texts) == text_of(final), (texts, final)
    assert final.usage.input_tokens > 0 and 0 < final.usage.output_tokens <= 6, final.usage
    assert final.stop_reason in ("max_tokens", "end_turn"), final

    raw = client.messages.create(model=BUNDLED_ID, max_tokens=4, messages=ASK, stream=True)
    events = [event.type for event in raw]
    assert events[0] == "message_start" and events[-2:] == ["message_delta", "message_stop"], events
    blocks = [event for event in events[1:-2] if event != "ping"]
    assert blocks[0] == "content_block_start" and blocks[-1] == "content_block_stop", events
    assert set(blocks) == set(BLOCK_EVENTS), events


def check_tools(client: anthropic.Anthropic) -> None:
    """A tool use and its result reach the model; a named tool is called, whole and streamed."""
    turns: Any = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "Sunny, 21 C"}]},
            {"type": "text", "text": "Say it in one word."},
        ]},
    ]  # fmt: skip
    answered = client.messages.create(model=BUNDLED_ID, max_tokens=4, tools=[WEATHER], messages=turns)
    assert answered.content and answered.usage.input_tokens > 0, answered

    ask: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = client.messages.create(
        model=BUNDLED_ID, max_tokens=48, tools=[WEATHER], tool_choice={"type": "tool", "name": "weather"}, messages=ask
    )
    uses = [block for block in forced.content if block.type == "tool_use"]
    assert forced.stop_reason == "tool_use" and uses and uses[0].name == "weather", forced
    assert isinstance(uses[0].input, dict) and uses[0].id, uses[0]

    with client.messages.stream(
        model=BUNDLED_ID, max_tokens=48, tools=[WEATHER], tool_choice={"type": "tool", "name": "weather"}, messages=ask
    ) as stream:
        kinds = [(event.type, getattr(getattr(event, "delta", None), "type", None)) for event in stream]
        final = stream.get_final_message()
    assert ("content_block_delta", "input_json_delta") in kinds, kinds
    streamed = [block for block in final.content if block.type == "tool_use"]
    assert final.stop_reason == "tool_use" and streamed and streamed[0].name == "weather", final
    assert isinstance(streamed[0].input, dict), streamed[0]


def test_messages_on_llama_cpp_python(service: RunningService, clients: list[anthropic.Anthropic]) -> None:
    client = client_of(service, clients)
    check_plain_and_streamed(client)
    check_tools(client)


def test_count_tokens_and_the_key(service: RunningService, clients: list[anthropic.Anthropic]) -> None:
    """count_tokens counts what the model reads (its chat template around the messages, with the engine's
    tokenizer): a message's input_tokens; a wrong key is Anthropic's authentication error."""
    client = client_of(service, clients)
    counted = client.messages.count_tokens(model=BUNDLED_ID, system="You are terse.", messages=ASK)
    message = client.messages.create(model=BUNDLED_ID, max_tokens=2, system="You are terse.", messages=ASK)
    assert counted.input_tokens == message.usage.input_tokens > 0, (counted, message.usage)
    longer = client.messages.count_tokens(model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hello. " * 20}])
    assert longer.input_tokens > counted.input_tokens + 20, longer

    with pytest.raises(anthropic.AuthenticationError) as refused:
        client_of(service, clients, key="wrong-key").messages.create(model=BUNDLED_ID, max_tokens=2, messages=ASK)
    body: Any = refused.value.body
    assert body["type"] == "error" and body["error"]["type"] == "authentication_error", body
    with pytest.raises(anthropic.AuthenticationError):
        client_of(service, clients, key="wrong-key").messages.count_tokens(model=BUNDLED_ID, messages=ASK)


def test_a_client_leaving_a_stream_frees_the_engine(
    service: RunningService, clients: list[anthropic.Anthropic]
) -> None:
    """The core sees the client of a dialect leave as it sees its own: the generation is cancelled in the engine,
    and the request log says the client closed it."""
    client = client_of(service, clients)
    story: Any = [{"role": "user", "content": "Tell me a very long story."}]
    with client.messages.stream(model=BUNDLED_ID, max_tokens=3000, messages=story) as stream:
        texts = [text for text, _ in zip(stream.text_stream, range(3), strict=False)]
    assert len(texts) == 3
    wait_for(lambda: service.model()["running_requests"] == 0, 10, "no running request")
    after = client.messages.create(model=BUNDLED_ID, max_tokens=2, messages=ASK)
    assert text_of(after)
    assert [record["status"] for record in service.client.requests()][-2:] == [499, 200]


def test_messages_on_llama_server(llama_server_service: StartService, clients: list[anthropic.Anthropic]) -> None:
    service = llama_server_service()
    service.start_on_llama_server(2)
    client = client_of(service, clients)
    message = client.messages.create(model=BUNDLED_ID, max_tokens=6, system="You are terse.", messages=ASK)
    assert text_of(message) and message.usage.input_tokens > 0, message
    assert 0 < message.usage.output_tokens <= 6, message.usage
    with client.messages.stream(model=BUNDLED_ID, max_tokens=6, messages=ASK) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == text_of(final) != "", final
    assert final.usage.input_tokens > 0 and 0 < final.usage.output_tokens <= 6, final.usage
    counted = client.messages.count_tokens(model=BUNDLED_ID, system="You are terse.", messages=ASK)
    assert counted.input_tokens == message.usage.input_tokens, (counted, message.usage)
