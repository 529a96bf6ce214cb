"""A model started without parameters where llama-server is built (the test build of installers/test.sh, the bundled
model, the real service and the official `openai` client): its slots each get a default context, so concurrent
requests that together outgrow one conversation's context are all served; and before its first start the service
already names llama-server, so that the request that starts it is checked and adapted for llama-server.

Found on an H200: with `-c 4096 --parallel 8 --kv-unified`, 7 of 16 concurrent requests of 576 tokens were answered
HTTP 500 "Context size has been exceeded"."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import openai

from app.hub.library import BUNDLED_ID
from app.planner.defaults import DEFAULT_CONTEXT, DEFAULT_SLOTS
from engines.gguf import read_gguf_info
from tests.support.service import RunningService, StartService

WORDS = ("river", "mountain", "lantern", "copper", "violet", "harbor", "meadow", "thunder", "pocket", "garden",
         "silver", "window", "candle", "forest", "marble", "pepper", "orbit", "anchor", "velvet", "kettle")  # fmt: skip
PAIRS = 270  # a word and a number, about 4.9 tokens of the bundled model each: about 1,330 tokens a prompt


def _prompt(index: int) -> str:
    """A prompt of its own (a shared prefix would be the prompt cache's, not the context's, to hold)."""
    rng = random.Random(index)
    words = " ".join(f"{rng.choice(WORDS)} {rng.randrange(1000)}" for _ in range(PAIRS))
    return f"List {index}. Repeat the first three words of this list: {words}"


def _stream(service: RunningService, index: int, start: threading.Barrier, results: dict[int, Any]) -> None:
    """One streamed chat completion, begun with the others: its prompt's tokens, or the error it got."""
    client = service.openai_client().with_options(timeout=240)  # 4 x 1,330 prompt tokens at once on 2 busy cores
    start.wait(timeout=60)
    try:
        stream = client.chat.completions.create(
            model=BUNDLED_ID, messages=[{"role": "user", "content": _prompt(index)}], max_tokens=24, stream=True,
            stream_options={"include_usage": True}, temperature=0,
        )  # fmt: skip
        usage, content = None, 0
        for chunk in stream:
            content += sum(1 for choice in chunk.choices if choice.delta.content)
            usage = chunk.usage or usage
        results[index] = (usage.prompt_tokens if usage else None, content)
    except openai.APIError as exc:
        results[index] = exc


def test_a_default_start_serves_concurrent_requests_that_together_outgrow_one_context(
    llama_server_service: StartService, bundled_gguf: Path
) -> None:
    service = llama_server_service()
    started = service.client.start_model(BUNDLED_ID, wait=True)  # no parameters: the default plan
    assert started["state"] == "ready", service.client.logs(BUNDLED_ID)
    assert started["engine"] == "llama-server" and started["plan"]["parallel"] == DEFAULT_SLOTS

    start = threading.Barrier(DEFAULT_SLOTS)
    results: dict[int, Any] = {}
    threads = [threading.Thread(target=_stream, args=(service, i, start, results)) for i in range(DEFAULT_SLOTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    errors = {i: str(result) for i, result in results.items() if isinstance(result, Exception)}
    assert not errors, f"{errors}\n" + "\n".join(service.client.logs(BUNDLED_ID)[-20:])
    assert sorted(results) == list(range(DEFAULT_SLOTS))
    prompt_tokens = [tokens for tokens, _ in results.values()]
    assert all(tokens is not None and tokens > 1000 for tokens in prompt_tokens), prompt_tokens
    assert sum(prompt_tokens) > DEFAULT_CONTEXT  # together more than one conversation's default context
    assert all(content > 0 for _, content in results.values()), results

    trained = read_gguf_info(bundled_gguf).context_length
    assert trained is not None
    total = min(DEFAULT_CONTEXT, trained) * DEFAULT_SLOTS  # 4 x 4096 for the bundled model
    assert service.model()["plan"]["context"] == total
    argv = service.model()["launch"]["argv"]
    assert argv[argv.index("-c") + 1] == str(total) and "--kv-unified" in argv
    # The Load dialog's answer: the same plan, its context bounded by the trained context of each slot.
    settings = service.client.model_settings(BUNDLED_ID)
    assert settings["plan"]["context"] == total and settings["plan"]["engine"] == "llama-server"
    assert settings["bounds"]["context"][1] == trained * DEFAULT_SLOTS


def test_a_model_never_started_is_listed_on_llama_server(llama_server_service: StartService) -> None:
    service = llama_server_service()
    model = service.model()
    assert model["state"] == "stopped" and model["pid"] is None
    assert model["engine"] == "llama-server"


def test_a_logprobs_request_that_starts_the_model_on_llama_server_is_served(llama_server_service: StartService) -> None:
    """The first request starts the model (JIT) on llama-server, which answers `logprobs`: not refused for
    llama-cpp-python's sake."""
    service = llama_server_service()
    assert service.model()["state"] == "stopped"
    reply = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, logprobs=True,
        top_logprobs=2,
    )  # fmt: skip
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content
    assert all(len(token.top_logprobs) == 2 for token in logprobs.content)
    assert service.model()["engine"] == "llama-server"
