"""The memory model: what a plan costs in RAM and in VRAM per GPU, part by part.

llama.cpp: weights, KV cache, the output (logits) buffer and the compute buffer, sized the way llama.cpp sizes them
(see `llama_context` and `sched_reserve` in its load log), plus the engine process's own runtime. vLLM: weights,
activations of its profiling run, non-torch memory (CUDA context, NCCL), and what is left of
`gpu_memory_utilization` becomes KV cache, from which follow its capacity in tokens and the maximum concurrency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from app.planner.facts import ModelFacts
from engines.base import LaunchPlan

MIB = 1 << 20
GIB = 1 << 30

# Process runtime of llama-cpp-python's server beside its buffers: the interpreter, FastAPI/uvicorn, numpy, libllama
# and its thread pool. Measured on Linux x86_64 with llama-cpp-python 0.3.36 (tests/bench/memory_accuracy.py: the
# resident memory left once every buffer is accounted for, 125-150 MiB over contexts 512 to 8192); calibration
# corrects it with what each machine measures.
LLAMA_CPP_PYTHON_RUNTIME = 140 * MIB
CUDA_CONTEXT = 300 * MIB  # per GPU a CUDA process touches: context, cuBLAS handles and kernels
METAL_CONTEXT = 150 * MIB
# vLLM: memory outside torch's allocator per GPU (CUDA context, NCCL buffers) and CUDA graphs for decode batches.
VLLM_NON_TORCH = 1 * GIB
VLLM_CUDA_GRAPHS = 512 * MIB
# llama-cpp-python serves embeddings with n_seq_max = min(n_batch, 256) (llama_max_parallel_sequences) and
# llama.cpp keeps one output row per sequence.
LLAMA_MAX_SEQUENCES = 256
# llama-server's process beside its buffers: the executable, libllama and libggml, the HTTP server and its thread
# pool. Measured on Linux x86_64 with the llama-server built from llama-cpp-python 0.3.36's sources
# (tests/bench/memory_accuracy.py: resident at load less weights, KV cache and output buffer, 32-33 MiB at contexts
# 512 to 8192 with 1 and 4 slots); calibration corrects it per machine.
LLAMA_SERVER_RUNTIME = 32 * MIB
LLAMA_UBATCH = 512  # llama.cpp's default physical batch (-ub): the tokens one compute graph takes
KV_PAD = 256  # llama.cpp pads the KV cache's cells (per sequence when it is not unified) to a multiple of this
TOKEN_DATA_BYTES = 12  # llama_token_data: the candidates array each slot's sampler keeps, one per vocabulary entry
CACHE_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "fp8": 1.0}


@dataclass(frozen=True)
class MemoryPart:
    """One part of a plan's memory: bytes in system RAM and bytes on each GPU it uses."""

    name: str  # weights, kv_cache, compute, workspace, runtime
    ram: int
    vram: int = 0
    # Resident in RAM from the moment the engine is ready. Buffers the engine only writes while it computes
    # become resident as requests touch them, up to all of it for a prompt that fills the context.
    resident_at_load: bool = True


@dataclass(frozen=True)
class MemoryEstimate:
    """A plan's predicted memory. vram is per GPU; kv_tokens and max_concurrency are vLLM's."""

    parts: tuple[MemoryPart, ...]
    gpus: int = 0
    kv_tokens: int | None = None
    max_concurrency: int | None = None

    @property
    def ram(self) -> int:
        return sum(part.ram for part in self.parts)

    @property
    def vram(self) -> int:
        return sum(part.vram for part in self.parts)

    @property
    def ram_at_load(self) -> int:
        """RAM resident once the engine is ready, before any request; `ram` is the peak under a full context."""
        return sum(part.ram for part in self.parts if part.resident_at_load)

    def part(self, name: str) -> MemoryPart:
        return next(part for part in self.parts if part.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ram": self.ram, "ram_at_load": self.ram_at_load, "vram_per_gpu": self.vram}


class MissingFacts(ValueError):
    """The model's facts lack what the memory model needs (a header without layer or head counts)."""


def _need(value: int | None, what: str) -> int:
    if value is None:
        raise MissingFacts(f"the model does not state its {what}")
    return value


def llama_cpp_memory(
    facts: ModelFacts,
    context: int,
    *,
    batch: int = 512,
    gpu_layers: int = 0,
    gpu_backend: str | None = None,  # "cuda" or "metal" when layers are offloaded
    cache_type: str = "f16",
    runtime: int = LLAMA_CPP_PYTHON_RUNTIME,
) -> MemoryEstimate:
    """llama.cpp serving `facts` at `context` tokens with `gpu_layers` offloaded (flash attention off, mmap on).

    Offloaded layers move their share of weights, KV cache and compute to the GPU; the output layer follows once
    every repeating layer is offloaded (llama.cpp's -ngl counts it as one more layer).
    """
    layers = _need(facts.layers, "layer count")
    weights = _need(facts.weight_bytes, "weight size")
    vocab = _need(facts.vocab_size, "vocabulary size")
    embd = _need(facts.embedding_length, "embedding length")
    heads = _need(facts.attention_heads, "attention head count")
    kv_per_token = _need(facts.kv_bytes_per_token(CACHE_TYPE_BYTES[cache_type]), "KV head layout")
    tokens = min(batch, context)
    offloaded = min(gpu_layers, layers + 1) if gpu_backend else 0
    on_gpu = offloaded / (layers + 1)
    kv = context * kv_per_token
    output = (vocab + embd) * 4 * min(batch, LLAMA_MAX_SEQUENCES)
    # The compute buffer holds the larger of two stages of the graph: the logits of a batch, or one layer's
    # attention scores (f32, one row per head plus the mask) beside its feed-forward activations.
    logits_stage = (vocab + 2 * embd) * tokens * 4
    attention_stage = ((heads + 1) * context + (facts.feed_forward_length or 4 * embd) + 3 * embd) * tokens * 4
    # ggml's CPU backend also keeps a work buffer, the largest of which holds the attention weights converted to f16
    # for their product with V (seen as a separate mapping growing with the context in /proc/PID/smaps).
    workspace = heads * context * tokens * 2
    compute = max(logits_stage, attention_stage)
    return _llama_estimate(weights, on_gpu, kv, layers, offloaded, gpu_backend, output, compute, workspace, runtime)


def _llama_estimate(
    weights: float,
    on_gpu: float,
    kv: int,
    layers: int,
    offloaded: int,
    gpu_backend: str | None,
    output: int,
    compute: int,
    workspace: int,
    runtime: int,
) -> MemoryEstimate:
    """llama.cpp's parts, split between system and GPU memory by the layers offloaded (both engines share it)."""
    context_overhead = (CUDA_CONTEXT if gpu_backend == "cuda" else METAL_CONTEXT) if offloaded else 0
    return MemoryEstimate(
        parts=(
            MemoryPart("weights", round(weights * (1 - on_gpu)), round(weights * on_gpu)),
            MemoryPart(
                "kv_cache",
                round(kv * (1 - min(offloaded, layers) / layers)),
                round(kv * min(offloaded, layers) / layers),
            ),
            MemoryPart("compute", output + (0 if offloaded else compute), compute if offloaded else 0, False),
            MemoryPart("workspace", 0 if offloaded else workspace, workspace if offloaded else 0, False),
            MemoryPart("runtime", runtime, context_overhead),
        ),
        gpus=1 if offloaded else 0,
    )


def vllm_memory(
    facts: ModelFacts,
    gpu_memory: int,
    *,
    max_model_len: int,
    gpu_memory_utilization: float = 0.9,
    tensor_parallel: int = 1,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    kv_cache_dtype_bytes: float = 2.0,
) -> MemoryEstimate:
    """vLLM on `tensor_parallel` GPUs of `gpu_memory` bytes each; the KV cache gets whatever is left of the budget.

    Activations follow vLLM's profiling run: `max_num_batched_tokens` tokens through one layer's hidden and MLP
    tensors (16-bit), and `max_num_seqs` rows of float32 logits for the sampler.
    """
    weights = _need(facts.weight_bytes, "weight size") // tensor_parallel
    embd = _need(facts.embedding_length, "embedding length")
    vocab = _need(facts.vocab_size, "vocabulary size")
    kv_per_token = _need(facts.kv_bytes_per_token(kv_cache_dtype_bytes), "KV head layout") / tensor_parallel
    mlp = facts.feed_forward_length or 4 * embd
    activations = max_num_batched_tokens * (4 * embd + 2 * mlp // tensor_parallel) * 2 + max_num_seqs * vocab * 4
    overhead = VLLM_NON_TORCH + VLLM_CUDA_GRAPHS
    budget = int(gpu_memory * gpu_memory_utilization)
    kv = max(0, budget - weights - activations - overhead)
    kv_tokens = int(kv // kv_per_token)
    return MemoryEstimate(
        parts=(
            MemoryPart("weights", 0, weights),
            MemoryPart("kv_cache", 0, kv),
            MemoryPart("compute", 0, activations),
            MemoryPart("runtime", 2 * GIB, overhead),  # host side: the API server and each worker's interpreter
        ),
        gpus=tensor_parallel,
        kv_tokens=kv_tokens,
        max_concurrency=kv_tokens // max_model_len if max_model_len else None,
    )


def _pad(value: int, to: int) -> int:
    return -(-value // to) * to


def llama_server_kv_cells(context: int, parallel: int, unified: bool) -> int:
    """The KV cache's cells for `-c context --parallel N`: the total context, padded as a whole when the cache is
    unified, per slot (context / N, padded) when each slot has its own."""
    if unified or parallel == 1:
        return _pad(context, KV_PAD)
    return _pad(max(1, context // parallel), KV_PAD) * parallel


def llama_server_memory(
    facts: ModelFacts,
    context: int,
    *,
    parallel: int = 1,
    ubatch: int = LLAMA_UBATCH,
    kv_unified: bool = True,
    flash_attention: bool = True,
    gpu_layers: int = 0,
    gpu_backend: str | None = None,  # "cuda" or "metal" when layers are offloaded
    cache_type: str = "f16",
    runtime: int = LLAMA_SERVER_RUNTIME,
) -> MemoryEstimate:
    """llama-server serving `facts` with `-c context --parallel N -ub ubatch` (mmap on), part by part.

    Unlike llama-cpp-python it asks the graph for one output row per slot, never one per prompt token: llama.cpp
    reserves a compute buffer with logits for a whole ubatch, but a server without embeddings only writes the rows
    of the slots it samples, so only those pages become resident. Flash attention (`-fa auto`, on wherever the
    backend has it, the CPU included) never materialises the attention scores: a layer's activations are the
    ubatch's hidden and feed-forward rows plus the f16 mask over the KV cells (with the bundled model at 2048
    tokens: 15 MiB touched of a 102 MiB compute buffer, measured through libllama with one output row). Each slot's
    sampler holds a candidates array the size of the vocabulary. Not counted: the prompt cache in RAM
    (`--cache-ram`), which grows with the prompts of different conversations up to its limit.
    """
    layers = _need(facts.layers, "layer count")
    weights = _need(facts.weight_bytes, "weight size")
    vocab = _need(facts.vocab_size, "vocabulary size")
    embd = _need(facts.embedding_length, "embedding length")
    heads = _need(facts.attention_heads, "attention head count")
    kv_per_token = _need(facts.kv_bytes_per_token(CACHE_TYPE_BYTES[cache_type]), "KV head layout")
    slots = max(1, parallel)
    cells = llama_server_kv_cells(context, slots, kv_unified)
    tokens = min(ubatch, cells)
    offloaded = min(gpu_layers, layers + 1) if gpu_backend else 0
    on_gpu = offloaded / (layers + 1)
    kv = cells * kv_per_token
    output = vocab * slots * 4
    feed_forward = facts.feed_forward_length or 4 * embd
    layer = (3 * feed_forward + 3 * embd) * tokens * 4  # a layer's hidden and feed-forward rows, f32
    if flash_attention:  # beside them, the f16 mask over the KV cells
        compute = layer + tokens * cells * 2 + output
        workspace = 0
    else:  # the scores of every head against every cell, in f32 and again in f16 for their product with V
        compute = max((heads + 1) * cells * tokens * 4, layer) + output
        workspace = heads * cells * tokens * 2
    runtime += slots * vocab * TOKEN_DATA_BYTES
    return _llama_estimate(weights, on_gpu, kv, layers, offloaded, gpu_backend, output, compute, workspace, runtime)


def _llama_cpp_python_plan(facts: ModelFacts, plan: LaunchPlan) -> MemoryEstimate:
    backend = "cuda" if plan.gpu_layers else None
    return llama_cpp_memory(facts, plan.context_length, batch=plan.batch_size, gpu_layers=plan.gpu_layers,
                            gpu_backend=backend)  # fmt: skip


def _llama_server_plan(facts: ModelFacts, plan: LaunchPlan) -> MemoryEstimate:
    # engines.llama_server runs `-b batch` with llama.cpp's default ubatch, a unified KV cache and `-fa auto`.
    return llama_server_memory(
        facts, plan.context_length, parallel=plan.parallel, ubatch=min(plan.batch_size, LLAMA_UBATCH),
        gpu_layers=plan.gpu_layers, gpu_backend="cuda" if plan.gpu_layers else None,
    )  # fmt: skip


_PLAN_MEMORY: dict[str, Callable[[ModelFacts, LaunchPlan], MemoryEstimate]] = {
    "llama-cpp-python": _llama_cpp_python_plan,
    "llama-server": _llama_server_plan,
}


def plan_memory(engine: str, facts: ModelFacts, plan: LaunchPlan) -> MemoryEstimate:
    """The memory a GGUF plan needs on the engine that runs it (llama.cpp's model through llama-cpp-python for an
    engine without one of its own). Raises MissingFacts."""
    return _PLAN_MEMORY.get(engine, _llama_cpp_python_plan)(facts, plan)
