"""Prompts past the engine's limits are refused by the gateway before the engine sees them: OpenAI's 400
`context_length_exceeded`, naming the field, the prompt's tokens and the limit, streamed or not, for chat,
completions and embeddings, on both GGUF engines. The real service, the real engines (llama-cpp-python and the
llama-server test build) on the bundled model, and the official `openai` client."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import openai
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import RunningService, StartService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

CONTEXT = 512  # the engines' context here, and so their embedding batch (llama-server's companion: up to 1024)


def spaced(count: int) -> str:
    """A text of `count` tokens for SmolLM2's byte-level BPE: each " a" is a word of its own, one token."""
    return "a" + " a" * (count - 1)


def refused(raised: pytest.ExceptionInfo[openai.BadRequestError]) -> openai.BadRequestError:
    """The 400 a client got, checked to be OpenAI's for a prompt past the context."""
    error = raised.value
    assert error.code == "context_length_exceeded" and error.type == "invalid_request_error", error.body
    return error


def counts(message: str) -> list[int]:
    return [int(number) for number in re.findall(r"(\d+) tokens", message)]


def check_prompt_limits(service: RunningService) -> None:
    client = service.openai_client()
    long = spaced(CONTEXT + 100)
    for stream in (True, False):  # streamed first: llama-cpp-python answered that one a 502
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(
                model=BUNDLED_ID, messages=[{"role": "user", "content": long}], max_tokens=4, stream=stream
            )
        chat = refused(raised)
        assert chat.param == "messages" and CONTEXT in counts(chat.message), chat.message
        assert max(counts(chat.message)) > CONTEXT + 100 and "context" in chat.message, chat.message
        with pytest.raises(openai.BadRequestError) as raised:
            client.completions.create(model=BUNDLED_ID, prompt=long, max_tokens=4, stream=stream)
        completion = refused(raised)
        assert completion.param == "prompt", completion.body
        assert counts(completion.message) == [CONTEXT, CONTEXT + 100], completion.message
    # A long prompt that fits is counted and let through, streamed; its usage counts it as the engine does.
    fits: Any = [{"role": "user", "content": spaced(CONTEXT // 2)}]
    whole = client.chat.completions.create(model=BUNDLED_ID, messages=fits, max_tokens=4)
    streamed = client.chat.completions.create(
        model=BUNDLED_ID, messages=fits, max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(streamed)
    assert [chunk for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    usage = chunks[-1].usage
    assert whole.usage is not None and usage is not None and usage.prompt_tokens == whole.usage.prompt_tokens

    # Embeddings: one input at most the engine's batch; llama-cpp-python embedded only its first 512 tokens, silently,
    # and llama-server answered a 500 asking for a larger physical batch.
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model=BUNDLED_ID, input=spaced(CONTEXT + 1))
    single = refused(raised)
    assert single.param == "input" and counts(single.message) == [CONTEXT + 1, CONTEXT], single.message
    assert "batch" in single.message, single.message
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model=BUNDLED_ID, input=["short", "also short", long])
    listed = refused(raised)
    assert listed.param == "input[2]" and CONTEXT in counts(listed.message), listed.message
    at_limit = client.embeddings.create(model=BUNDLED_ID, input=["short", spaced(CONTEXT)])
    assert [len(item.embedding) > 0 for item in at_limit.data] == [True, True]


def test_llama_cpp_python_refuses_prompts_past_its_limits(paths: AppPaths, tmp_path: Path) -> None:
    """Streamed, a chat past the context was a 502 ("the engine ended the stream without sending anything")."""
    service = start_service_process(paths, tmp_path)
    try:
        started = service.client.start_model(
            BUNDLED_ID, wait=True, overrides={"engine": "llama-cpp-python", "context": CONTEXT}
        )
        assert started["engine"] == "llama-cpp-python" and started["state"] == "ready", started
        check_prompt_limits(service)
    finally:
        stop_service_process(service)


def test_llama_server_refuses_prompts_past_its_limits(llama_server_service: StartService) -> None:
    """Its own refusal was `exceed_context_size_error`, not OpenAI's code; its embeddings' was a 500."""
    service = llama_server_service()
    overrides: dict[str, int | str] = {"engine": "llama-server", "parallel": 1, "context": CONTEXT}
    started = service.client.start_model(BUNDLED_ID, wait=True, overrides=overrides)
    assert started["state"] == "ready", service.client.logs(BUNDLED_ID)
    check_prompt_limits(service)


def test_only_a_prompt_that_could_be_past_the_context_is_counted(service: RunningService) -> None:
    """The hot path stays lean: a prompt whose bytes cannot make the context's tokens costs no request to the
    tokenizer (its access log shows each one); one that can is counted, and refused past the context."""
    client = service.openai_client()
    client.chat.completions.create(model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    client.completions.create(model=BUNDLED_ID, prompt=spaced(1000), max_tokens=2)
    client.embeddings.create(model=BUNDLED_ID, input=["Hi", spaced(200)])

    def access_log() -> str:
        return "\n".join(service.client.logs(BUNDLED_ID))

    wait_for(lambda: "POST /v1/embeddings" in access_log(), 10, "the engine's access log line of the embeddings")
    assert "/extras/tokenize" not in access_log()
    context = service.model()["plan"]["context"]
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model=BUNDLED_ID, prompt=spaced(context + 50), max_tokens=2)
    assert counts(refused(raised).message) == [context, context + 50]
    wait_for(lambda: "POST /extras/tokenize/count" in access_log(), 10, "the count of the prompt past the context")
