"""OpenAI's documented fields against the real service on the bundled model (llama-cpp-python, and llama-server's
test build), with the official `openai` client: ignored ones are accepted with a normal answer, refused ones are a
400 naming the field and saying why."""

from __future__ import annotations

import openai
import pytest

from app.hub.library import BUNDLED_ID
from tests.support.service import RunningService, StartService

ASK = [{"role": "user", "content": "Say hello."}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def check_fields(service: RunningService) -> None:
    client = service.openai_client()
    reply = client.chat.completions.create(
        model=BUNDLED_ID, messages=ASK, max_completion_tokens=8, store=False, metadata={"team": "a"},
        service_tier="auto", prompt_cache_key="k", safety_identifier="s", user="u", reasoning_effort="low",
        modalities=["text"], verbosity="low",
    )  # fmt: skip
    assert reply.choices[0].message.content
    called = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],  # type: ignore[list-item]
        parallel_tool_calls=False, max_tokens=32,
    )  # fmt: skip
    assert called.choices[0].message.content or called.choices[0].message.tool_calls
    legacy = client.chat.completions.create(
        model=BUNDLED_ID, messages=ASK, functions=[WEATHER["function"]], function_call="none", max_tokens=8,  # type: ignore[list-item]
    )  # fmt: skip
    assert legacy.choices[0].message.content
    with pytest.raises(openai.BadRequestError, match="stores none") as refused:
        client.chat.completions.create(model=BUNDLED_ID, messages=ASK, store=True, max_tokens=4)  # type: ignore[arg-type]
    assert refused.value.body["param"] == "store"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="audio") as refused:
        client.chat.completions.create(model=BUNDLED_ID, messages=ASK, audio={"voice": "alloy", "format": "wav"})  # type: ignore[arg-type]
    assert refused.value.body["param"] == "audio"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match="truncate") as refused:
        client.embeddings.create(model=BUNDLED_ID, input="hello", dimensions=8)
    assert refused.value.body["param"] == "dimensions"  # type: ignore[index]
    embedded = client.embeddings.create(model=BUNDLED_ID, input="hello", user="u", encoding_format="float")
    assert embedded.data[0].embedding


def test_llama_cpp_python_openai_fields(service: RunningService) -> None:
    check_fields(service)
    with pytest.raises(openai.BadRequestError, match="llama-server serves them") as refused:
        service.openai_client().embeddings.create(model=BUNDLED_ID, input=[[9906, 1917]])
    assert refused.value.body["param"] == "input"  # type: ignore[index]


def test_llama_server_openai_fields(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(2)
    check_fields(service)
    # Token ids, as langchain's OpenAIEmbeddings sends them: one vector each, as for the same text.
    client = service.openai_client()
    by_ids = client.embeddings.create(model=BUNDLED_ID, input=[[9906, 1917], [42]])
    assert [len(item.embedding) for item in by_ids.data] == [576, 576] and by_ids.usage.prompt_tokens == 3
    one = client.embeddings.create(model=BUNDLED_ID, input=[9906, 1917]).data
    assert (
        len(one) == 1
        and max(abs(a - b) for a, b in zip(one[0].embedding, by_ids.data[0].embedding, strict=True)) < 1e-3
    )


def test_langchain_bind_tools_gets_an_answer(service: RunningService) -> None:
    """langchain's `bind_tools` sends `parallel_tool_calls`, which was a 400 before the field table."""
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model=BUNDLED_ID, base_url=service.url, api_key=service.api_key, max_tokens=32, max_retries=0)  # type: ignore[arg-type]
    answer = chat.bind_tools([WEATHER], parallel_tool_calls=False).invoke("Weather in Paris?")
    assert answer.content or answer.tool_calls  # type: ignore[attr-defined]
