"""The plan a model starts with when nobody chose one: llama-server where it is installed (parallel slots, each
keeping its own prompt cache, with a default context each), else llama-cpp-python with a prompt cache of its own;
CPU only, sound defaults."""

from __future__ import annotations

import os

import psutil

from app.planner.facts import ModelFacts, facts_from_gguf
from engines.base import LaunchPlan
from engines.gguf import GGUFInfo

DEFAULT_CONTEXT = 4096
DEFAULT_BATCH = 512
LLAMA_CPP_PYTHON = "llama-cpp-python"
LLAMA_SERVER = "llama-server"
# llama-server's slots when nobody says how many: an interactive chat and a script each keep a slot, and with it
# their prompt's cache, instead of evicting each other; as many as llama-server picks by itself.
DEFAULT_SLOTS = 4
# llama-cpp-python keeps the state after each answer in its prompt cache; this many conversations at full context
# can take turns (measured with three: 2.3-2.8 s to the first token of every turn without it).
PROMPT_CACHE_STATES = 3


def default_context(trained: int | None) -> int:
    """The context one conversation gets when nobody chose one: DEFAULT_CONTEXT, or the trained context if less."""
    return min(DEFAULT_CONTEXT, trained) if trained else DEFAULT_CONTEXT


def default_slots(engine: str, parallel: int | None = None) -> int:
    """The requests `engine` serves at once: `parallel` (or DEFAULT_SLOTS) on llama-server, one on the others."""
    return (parallel or DEFAULT_SLOTS) if engine == LLAMA_SERVER else 1


def physical_cores() -> int:
    """Physical cores, falling back to logical ones where the count is unknown.

    llama-cpp-python defaults to half the logical CPUs: on a 2-core machine that is one thread.
    """
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def logical_cores() -> int:
    return psutil.cpu_count(logical=True) or os.cpu_count() or 1


# How long the machine's CPU use is sampled before an engine starts: long enough to see work that holds a core,
# short beside the engine's own start.
BUSY_SAMPLE_S = 0.25


def busy_cores(sample_s: float = BUSY_SAMPLE_S) -> float:
    """Cores' worth of work this machine is doing now, measured over `sample_s` (blocking).

    Not the load average: its one-minute memory still counts work that has just ended (a download, the engine a
    restart replaces, a benchmark's previous round), and an engine started idle after it waited passively,
    at 41-45 tokens/s instead of 113 (llama-server, bundled model, tests/bench/engine_defaults.py)."""
    return psutil.cpu_percent(interval=sample_s) / 100 * logical_cores()


def spin_wait_fits(threads: int, busy: float | None = None) -> bool:
    """Whether the engine's threads may spin while they wait for each other (engines.base.openmp_wait_env): only
    where each of them finds a core free of other work. `busy`: cores' worth of other work, sampled now when
    None (busy_cores); half a core of background work is tolerated."""
    if busy is None:
        busy = busy_cores()
    return busy + threads <= logical_cores() + 0.5


def prompt_cache_state_bytes(facts: ModelFacts, context: int, batch: int) -> int | None:
    """What one entry of llama-cpp-python's prompt cache holds at most: the KV cache of a full context, the copy of
    its logits buffer (one row per token of a batch) and the tokens. None where the facts do not say."""
    kv_per_token = facts.kv_bytes_per_token()
    if kv_per_token is None or facts.vocab_size is None:
        return None
    logits_rows = min(context, batch) + 1  # the buffer's copy, and the last output inside llama.cpp's state
    return kv_per_token * context + logits_rows * facts.vocab_size * 4 + context * 4


def prompt_cache_bytes(facts: ModelFacts, context: int, batch: int, room: int | None = None) -> int:
    """The prompt cache for llama-cpp-python: PROMPT_CACHE_STATES full entries, fewer when only `room` bytes are
    left beside the engine's own memory, and none when not even one fits (an entry larger than the cache is
    dropped at once)."""
    one = prompt_cache_state_bytes(facts, context, batch)
    if one is None:
        return 0
    states = PROMPT_CACHE_STATES if room is None else max(0, min(PROMPT_CACHE_STATES, room // one))
    return states * one


def default_plan(
    model_id: str,
    info: GGUFInfo,
    engine: str = LLAMA_CPP_PYTHON,
    busy: float | None = None,
    parallel: int | None = None,
) -> LaunchPlan:
    """A plan for serving a GGUF model on the CPU with `engine`; `busy` as for spin_wait_fits (None: sampled now);
    `parallel`: llama-server's slots (None: DEFAULT_SLOTS).

    One thread per physical core: llama-cpp-python's own default, half the logical CPUs, is one thread on 2 cores
    and costs 1.6-1.9x; on a busy machine one thread was no better than two with passive waits (10.9 against 20.5
    tokens/s, tests/bench/engine_defaults.py).

    llama-server's context is one default context per slot. Its slots share `-c` (a unified KV cache): sized for
    one conversation, concurrent requests that together outgrow it are answered HTTP 500 "Context size has been
    exceeded" (7 of 16 requests of 576 tokens at 8 slots on an H200; 6 of 64 at 32 streams on the bundled model),
    and conversations taking turns evict each other's cache. Shared, one long conversation may still use more
    while the others are idle; llama-server caps each slot at the trained context."""
    server = engine == LLAMA_SERVER
    slots = default_slots(engine, parallel)
    context = default_context(info.context_length) * slots
    threads = physical_cores()
    return LaunchPlan(
        model_id=model_id,
        model_path=info.path,
        context_length=context,
        threads=threads,
        spin_wait=spin_wait_fits(threads, busy),
        batch_size=DEFAULT_BATCH,
        gpu_layers=0,
        parallel=slots,
        prompt_cache_bytes=0 if server else prompt_cache_bytes(facts_from_gguf(info), context, DEFAULT_BATCH),
    )
