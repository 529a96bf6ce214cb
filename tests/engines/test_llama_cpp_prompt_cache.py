"""llama-cpp-python's prompt cache: conversations taking turns resume from their cached state, and the cache counts
the logits copy each entry holds, so its size bounds its memory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import openai
from llama_cpp.llama import LlamaState

from app.planner.defaults import default_plan
from engines._llama_cpp_server import CountedRAMCache, state_bytes
from engines.gguf import read_gguf_info
from engines.llama_cpp import CACHED_SERVER, LlamaCppPythonEngine
from engines.states import EngineState
from engines.supervisor import EngineSupervisor
from tests.engines.test_supervisor import Recorder
from tests.support.waiting import wait_until

KEY = "secret-key-123"
ANSWERED = '"POST /v1/chat/completions HTTP/1.1" 200'


def _state(tokens: int, vocab: int = 1000, kv_bytes: int = 10_000) -> LlamaState:
    return LlamaState(
        input_ids=np.arange(tokens, dtype=np.intc),
        scores=np.zeros((tokens, vocab), dtype=np.single),
        n_tokens=tokens,
        llama_state=bytes(kv_bytes),
        llama_state_size=kv_bytes,
        seed=0,
    )


def test_an_entry_counts_its_logits_copy_and_tokens() -> None:
    state = _state(50)
    assert state_bytes(state) == 10_000 + 50 * 1000 * 4 + 50 * 4
    cache = CountedRAMCache(capacity_bytes=2 * state_bytes(state) + 1)
    for first in (0, 100, 200):  # three conversations that share no prefix
        cache[list(range(first, first + 50))] = _state(50)
    # llama-cpp-python's own cache counts 10 kB an entry and would keep all three; this one keeps the last two.
    assert len(cache.cache_state) == 2 and cache.cache_size <= 2 * state_bytes(state) + 1
    assert tuple(range(50)) not in cache.cache_state


def test_the_default_plan_has_a_cache_of_three_full_contexts(bundled_gguf: Path) -> None:
    plan = default_plan("smollm2", read_gguf_info(bundled_gguf))
    command = LlamaCppPythonEngine().build_command(plan, 1234, KEY)
    assert command.argv[1:3] == ("-I", str(CACHED_SERVER))
    at = command.argv.index("--cache_size")
    assert command.argv[at - 4 : at] == ("--cache", "true", "--cache_type", "ram")
    # SmolLM2: 30 layers x 3 KV heads x 64 x 2 (K and V) x 2 bytes a token, a 49152-token vocabulary
    one = 23_040 * 4096 + 513 * 49_152 * 4 + 4096 * 4
    assert int(command.argv[at + 1]) == plan.prompt_cache_bytes == 3 * one
    plain = LlamaCppPythonEngine().build_command(replace(plan, prompt_cache_bytes=0), 1234, KEY)
    assert plain.argv[1:3] == ("-m", "llama_cpp.server") and "--cache" not in plain.argv


async def _turns(tmp_path: Path, bundled_gguf: Path, cache_bytes: int) -> list[str]:
    """Conversation A, then B, then A's second turn on a real engine; the engine's log lines."""
    plan = replace(default_plan("smollm2", read_gguf_info(bundled_gguf)), prompt_cache_bytes=cache_bytes)
    engine = LlamaCppPythonEngine()
    supervisor = EngineSupervisor(
        "smollm2", lambda port: engine.build_command(plan, port, KEY), tmp_path / "engine.log", tmp_path / "records",
        Recorder(),
    )  # fmt: skip
    try:
        assert await supervisor.start() == EngineState.READY, supervisor.log.tail()
        client = openai.AsyncOpenAI(base_url=f"{supervisor.base_url}/v1", api_key=KEY, max_retries=0, timeout=120)
        a = [{"role": "user", "content": "Name three rivers of Europe."}]
        b = [{"role": "user", "content": "Write a haiku about copper wire."}]
        for messages in (a, b):
            reply = await client.chat.completions.create(model="smollm2", messages=messages, max_tokens=16)  # type: ignore[arg-type]
            messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
        a.append({"role": "user", "content": "And three of Asia?"})
        await client.chat.completions.create(model="smollm2", messages=a, max_tokens=4)  # type: ignore[arg-type]
        await client.close()
        # The engine's output is read as it comes: wait for its access line of the third request.
        await wait_until(lambda: sum(ANSWERED in line for line in supervisor.log.tail()) == 3, "three answers")
        return supervisor.log.tail()
    finally:
        await supervisor.stop()


async def test_a_conversation_resumes_from_the_cache_after_another_one(tmp_path: Path, bundled_gguf: Path) -> None:
    """A's second turn extends A's first exchange, which B's turn pushed out of the engine's context: the engine
    loads A's state from the cache ("cache hit") instead of evaluating the whole conversation again."""
    cache_bytes = default_plan("m", read_gguf_info(bundled_gguf)).prompt_cache_bytes
    lines = await _turns(tmp_path / "cached", bundled_gguf, cache_bytes)
    assert sum("cache hit" in line for line in lines) == 1, lines
    uncached = await _turns(tmp_path / "plain", bundled_gguf, 0)
    assert not any("cache hit" in line for line in uncached), uncached
