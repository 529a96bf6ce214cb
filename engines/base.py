"""The engine protocol: what every engine adapter answers, and the plain data it exchanges.

An adapter builds commands; the supervisor runs them. Adapters never start processes themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from engines.vllm_log import VLLMStartup


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start one engine for one model. Unknown values are None."""

    model_id: str
    model_path: Path
    context_length: int
    threads: int
    batch_size: int = 512
    gpu_layers: int = 0
    chat_format: str | None = None  # None: the engine uses the chat template stored in the GGUF
    embeddings: bool = True  # also serve /v1/embeddings
    # vLLM: a Hub repository or model directory instead of one file, and its parallelism and memory settings
    model_ref: str | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1  # stages across nodes (multi-node deployments; one machine: 1)
    distributed_executor_backend: str | None = None  # "ray" across nodes; None: vLLM's default
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None  # tokens one scheduler step takes (prefill chunks included)
    dtype: str | None = None
    quantization: str | None = None
    # llama-server: request slots served at once by continuous batching (they share `context_length`)
    parallel: int = 1
    # llama-cpp-python: bytes its RAM prompt cache may hold (the states of recent conversations); 0: no cache
    prompt_cache_bytes: int = 0
    # llama.cpp engines: OpenMP threads spin briefly before they sleep (SPIN_COUNT rounds), or sleep at once
    spin_wait: bool = False
    # Speculative decoding. llama-server: a draft model with the same vocabulary proposes up to `draft_max` tokens a
    # step, which the model checks in one batch; llama-cpp-python: prompt-lookup decoding, `lookup_tokens` drafted
    # from the prompt's own n-grams (0: off).
    draft_path: Path | None = None
    draft_model: str | None = None  # the draft's model id, for reports
    draft_max: int = 8
    draft_gpu_layers: int = 0
    lookup_tokens: int = 0


# Rounds an idle OpenMP thread spins before it sleeps, when the engine may spin (openmp_wait_env).
SPIN_COUNT = 1000


def openmp_wait_env(plan: LaunchPlan) -> dict[str, str]:
    """How llama.cpp's OpenMP threads wait for each other, between the steps of every token and between tokens.

    Spinning nearly triples decode on an idle machine: on 2 cores, 128-136 tokens/s against 41-47 with passive
    waits (llama-server, SmolLM2, tests/bench/engine_defaults.py). GNU OpenMP's default spin (300,000 rounds before
    sleeping) collapses where the cores are busy, as a spinning thread holds the core its descheduled peer needs:
    7-25 tokens/s against passive's 34-43 with one busy process per core. A spin bounded to 1,000 rounds keeps the
    idle speed (132) and beats passive there (54), so an engine started idle survives the machine getting busy
    later; with two busy processes per core only passive waits hold up (32 against 17.5), so the planner samples
    the machine when the engine starts (app.planner.defaults.spin_wait_fits) and waits passively where it is busy."""
    return {"GOMP_SPINCOUNT": str(SPIN_COUNT)} if plan.spin_wait else {"OMP_WAIT_POLICY": "passive"}


@dataclass(frozen=True)
class EngineCommand:
    """How to run an engine for a plan: argv, extra environment and the readiness probe."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    ready_path: str = "/v1/models"
    ready_headers: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # values to redact from every log line
    # Files the engine reads (an options file), by absolute path: the supervisor writes them readable only by the
    # user before it starts the engine and removes them once it has stopped; the adapter never writes anything.
    files: dict[Path, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Installation:
    """Whether an engine is installed here, and which version."""

    installed: bool
    version: str | None
    detail: str


# GPU servers compile kernels, capture CUDA graphs or build engines for minutes while starting, their progress
# bars rewriting one unended line: the supervisor waits this long for output before it gives up.
GPU_SERVER_QUIET_START_S = 600.0


@dataclass(frozen=True)
class Capabilities:
    """What the gateway must know to serve an engine well."""

    max_concurrency: int  # requests it serves at once; the gateway queues the rest
    stream_usage: bool  # honours stream_options.include_usage itself
    tokenize_count_path: str | None = None  # POST {"input": text} -> {"count": n}, for usage it omits
    tokenize_path: str | None = None  # POST {"content": text} -> {"tokens": [...]} (llama.cpp's), for prompt sizes
    embeddings_pooled: bool = True  # False: /v1/embeddings returns one vector per token
    logprobs: bool = True  # answers `logprobs` requests
    parallel_from_plan: bool = False  # True: it serves `plan.parallel` requests at once (at most max_concurrency)
    quiet_start_s: float | None = None  # it may print nothing this long while starting (compiling, capturing)
    slot_ids: bool = False  # True: a request may name the slot that serves it (llama-server's `id_slot`)
    media_parts: bool = True  # takes image, audio and other non-text content parts in chat messages
    token_inputs: bool = True  # takes token ids (lists of whole numbers) as /v1/embeddings input


class Engine(Protocol):
    """An inference engine adapter. Registered by name in `engines.registry.ENGINES`."""

    name: str
    capabilities: Capabilities

    def detect(self) -> Installation:
        """Report whether the engine can be run on this machine."""
        ...

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        """The command that serves `plan` on 127.0.0.1:`port`, accepting only `api_key`."""
        ...


@runtime_checkable
class OffloadingEngine(Protocol):
    """An engine that can put a model's layers on a GPU when its build has a GPU backend."""

    def gpu_offload(self) -> bool:
        """Whether the installed build can offload layers to a GPU (a CPU-only build ignores `gpu_layers`)."""
        ...


@runtime_checkable
class EmbeddingModeEngine(Protocol):
    """An engine that serves embeddings only from a second process of the model in embedding mode."""

    def embedding_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        """The command that serves /v1/embeddings for `plan`'s model on 127.0.0.1:`port`, pooled as OpenAI's."""
        ...


@dataclass(frozen=True)
class InputLimit:
    """The most tokens an engine's process takes in one embeddings input, and the setting that makes it so."""

    tokens: int
    set_by: str  # for a client's error message: "its batch (--n_batch)"


@runtime_checkable
class EmbeddingLimitEngine(Protocol):
    """An engine whose embedding process cuts a longer input short, or fails on it, past a number of tokens."""

    def embedding_limit(self, plan: LaunchPlan) -> InputLimit:
        """The limit of the process that embeds for `plan`: its command (`embedding_command` where it has one)."""
        ...


@runtime_checkable
class StartupLogEngine(Protocol):
    """An engine whose start-up log says what it reserved (KV cache memory, requests it can serve at once)."""

    def read_startup_line(self, before: VLLMStartup, line: str) -> VLLMStartup:
        """What is known of the start-up after one more log line: `before` itself when the line says nothing new."""
        ...
