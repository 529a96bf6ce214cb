"""The recommendation: which engine, which variant of a model and which parameters fit this machine, and why.

Every option is costed with the memory model against free memory less a safety margin. Options that run fully on a
GPU beat partial offload, which beats the CPU; within a tier the best quality (most bits per weight) wins, then the
longer context. For serving several users on NVIDIA, vLLM comes first when the model has a safetensors variant; for a
GGUF model, llama-server (continuous batching over parallel slots) replaces llama-cpp-python when it is available.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from app.hardware.profile import GPUInfo, HardwareProfile
from app.planner.budgets import Budgets, decode_speed
from app.planner.calibration import Correction
from app.planner.defaults import DEFAULT_BATCH, DEFAULT_SLOTS, prompt_cache_bytes, prompt_cache_state_bytes
from app.planner.engine_choice import EngineFit
from app.planner.facts import ModelFacts
from app.planner.memory import (
    MemoryEstimate,
    MemoryPart,
    MissingFacts,
    llama_cpp_memory,
    llama_server_memory,
    vllm_memory,
)
from app.quality.expected import over_threshold

USES = ("chat", "serve", "long-context")
SERVE_USERS = 8
CONTEXT_STEP = 256
LOW_QUALITY_BITS = 4.0  # below this many bits per weight, answers degrade noticeably
MAX_PARALLEL = 64  # llama-server slots: beyond this, per-slot bookkeeping outweighs what batching gains
VLLM_BATCHED_TOKENS = 8192  # vLLM's tokens per scheduler step: what its profiling run (and the memory model) sizes


@dataclass(frozen=True)
class Variant:
    """One way to get a model: a GGUF file (split sets count as one) or a safetensors repository."""

    name: str  # Q4_K_M, Q8_0, BF16, AWQ, FP8, ...
    facts: ModelFacts
    location: str  # a local path, or repo/file on the Hub

    @property
    def engine_family(self) -> str:
        return "llama.cpp" if self.facts.format == "gguf" else "vllm"


@dataclass(frozen=True)
class Need:
    """What the user wants to do: a context length to aim for, the least acceptable one, and concurrent users."""

    use: str
    context: int
    min_context: int
    users: int


@dataclass(frozen=True)
class Option:
    """One costed way to run the model, with the reason for each parameter."""

    engine: str  # llama-cpp-python, llama-server or vllm
    variant: str
    location: str
    tier: str  # gpu, partial, cpu
    fits: bool
    context: int
    max_context: int
    memory: MemoryEstimate
    parameters: dict[str, Any]
    reasons: tuple[str, ...]
    decode_tokens_per_s: float | None
    bits_per_weight: float | None
    command: tuple[str, ...] = ()
    # The variant's expected quality loss (app.quality.expected): measured on a card, or published; None: unknown.
    quality_loss: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["memory"] = self.memory.to_dict()
        return data


@dataclass(frozen=True)
class Recommendation:
    """The best option (None when nothing fits), ranked alternatives, and what stood in the way."""

    use: str
    best: Option | None
    alternatives: tuple[Option, ...]
    problems: tuple[str, ...] = ()
    budgets: dict[str, int] = field(default_factory=dict)
    engines: tuple[EngineFit, ...] = ()  # every known engine scored for this model here (app.planner.engine_choice)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engines": [fit.to_dict() for fit in self.engines],
            "use": self.use,
            "best": self.best.to_dict() if self.best else None,
            "alternatives": [option.to_dict() for option in self.alternatives],
            "problems": list(self.problems),
            "budgets": self.budgets,
        }


def need_for(use: str, trained_context: int | None, users: int | None = None) -> Need:
    """The context and concurrency a use asks for, bounded by what the model was trained on."""
    trained = trained_context or 4096
    if use == "chat":
        return Need(use, min(trained, 8192), min(trained, 2048), 1)
    if use == "serve":
        return Need(use, min(trained, 8192), min(trained, 4096), users or SERVE_USERS)
    if use == "long-context":
        return Need(use, min(trained, 131072), min(trained, 16384), 1)
    raise ValueError(f"unknown use {use!r}; choose one of {', '.join(USES)}")


def _largest_context(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest multiple of CONTEXT_STEP in [low, high] for which `fits` holds, or 0."""
    if high < low or not fits(low):
        return 0
    lo, hi = low // CONTEXT_STEP, high // CONTEXT_STEP
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid * CONTEXT_STEP) else (lo, mid - 1)
    return max(lo * CONTEXT_STEP, low)


def gpu_layers_that_fit(hw: HardwareProfile, facts: ModelFacts, context: int, parallel: int, server: bool) -> int:
    """The layers of a GGUF model to put on `hw`'s GPU at `context`: all of them (and the output layer) where they
    fit with the planner's margins, else as many as fit, 0 without a usable GPU."""
    budgets = Budgets.of(hw)
    if not budgets.gpus:
        return 0
    backend = "metal" if budgets.unified else "cuda"

    def fits(layers: int) -> bool:
        if server:
            estimate = llama_server_memory(facts, context, parallel=parallel, gpu_layers=layers, gpu_backend=backend)
        else:
            estimate = llama_cpp_memory(facts, context, gpu_layers=layers, gpu_backend=backend)
        return budgets.llama_fits(estimate)

    return next((n for n in range((facts.layers or 0) + 1, 0, -1) if fits(n)), 0)


def _llama_option(
    hw: HardwareProfile,
    budgets: Budgets,
    variant: Variant,
    need: Need,
    correction: Correction,
    llama_server: bool = False,
) -> Option:
    facts = variant.facts
    layers = facts.layers or 0
    backend = ("metal" if budgets.unified else "cuda") if budgets.gpus else None
    threads = hw.cpu.physical_cores or hw.cpu.logical_cores

    parallel = min(max(need.users, DEFAULT_SLOTS), MAX_PARALLEL)
    server = llama_server
    # `context` below is what one conversation gets; llama-server's slots share a KV cache of one each, else
    # concurrent requests that together outgrow it are refused (HTTP 500, "Context size has been exceeded").
    slots = parallel if server else 1

    def estimate(context: int, gpu_layers: int) -> MemoryEstimate:
        on = backend if gpu_layers else None
        if server:
            return correction.apply(llama_server_memory(facts, context * slots, parallel=parallel,
                                                        gpu_layers=gpu_layers, gpu_backend=on))  # fmt: skip
        return correction.apply(llama_cpp_memory(facts, context, gpu_layers=gpu_layers, gpu_backend=on))

    low, high = min(need.min_context, CONTEXT_STEP * 8), facts.trained_context or need.context
    gpu_layers = layers + 1 if backend else 0
    best_context = _largest_context(lambda c: budgets.llama_fits(estimate(c, gpu_layers)), low, high)
    if backend and best_context < need.min_context:
        # Not all of it fits on the GPU at a usable context: offload as many layers as fit, the rest on the CPU.
        gpu_layers = next((n for n in range(layers, 0, -1) if budgets.llama_fits(estimate(need.min_context, n))), 0)
        best_context = _largest_context(lambda c: budgets.llama_fits(estimate(c, gpu_layers)), low, high)
    context = min(need.context, best_context) if best_context else need.min_context
    memory = estimate(context, gpu_layers)
    tier = "gpu" if gpu_layers > layers else "partial" if gpu_layers else "cpu"
    fits = best_context >= need.min_context
    where = {
        "gpu": f"all {layers} layers on the GPU" + (" (unified memory)" if budgets.unified else ""),
        "partial": f"{gpu_layers} of {layers} layers on the GPU, the rest on the CPU",
        "cpu": "runs on the CPU" + (": no usable GPU" if not budgets.gpus else ""),
    }[tier]
    if server:
        clients = f"{need.users} users" if need.users > 1 else "a chat and a script"
        engine_reason = (
            f"engine llama-server: {where}; continuous batching serves {clients} at once in {parallel} "
            f"parallel slots of {context} tokens each ({context * slots} in one shared KV cache), each slot keeping "
            "its prompt cache (llama-cpp-python answers one at a time)"
        )
    elif need.users == 1:
        engine_reason = f"engine llama.cpp: one user, {where}"
    else:
        engine_reason = (
            f"engine llama.cpp: {where}; it answers one request at a time, so {need.users} users take turns "
            "(`modeldeck engines build llama-server` would serve them at once; vLLM needs a safetensors model and an "
            "NVIDIA GPU)"
        )
    reasons: tuple[str, ...] = (
        engine_reason,
        f"quantization {variant.name}: {_bits(facts)} bits per weight, the best quality that fits"
        if fits
        else f"quantization {variant.name}: {_bits(facts)} bits per weight",
        f"context {context} tokens{' per slot' if server else ''}: "
        f"{'what the use asks for' if context >= need.context else 'the most that fits'}"
        f" (trained on {facts.trained_context or 'unknown'})",
        f"threads {threads}: one per physical core",
        "batch 512: llama.cpp's prompt batch; larger batches grow the compute buffer",
    )
    # the launch's context is the engine's `-c`: on llama-server, all the slots' together
    parameters: dict[str, Any] = {"gpu_layers": gpu_layers, "context": context * slots, "threads": threads,
                                  "batch": 512}  # fmt: skip
    if server:
        parameters["parallel"] = parallel
    else:
        # The cache's entries are copied out of the engine's buffers into system memory, wherever the layers run.
        cache = prompt_cache_bytes(facts, context, DEFAULT_BATCH, room=max(0, budgets.ram - memory.ram))
        parameters["prompt_cache"] = cache
        memory = replace(memory, parts=(*memory.parts, MemoryPart("prompt_cache", cache, 0, False)))
        reasons += (
            f"prompt cache {cache >> 20} MiB: the state after each answer, for {cache // one} conversations at "
            "full context, so that clients taking turns resume where they were"
            if cache and (one := prompt_cache_state_bytes(facts, context, DEFAULT_BATCH))
            else "prompt cache off: not one full context's state fits beside the engine",
        )
    return Option(
        engine="llama-server" if server else "llama-cpp-python",
        variant=variant.name,
        location=variant.location,
        tier=tier,
        fits=fits,
        context=context,
        max_context=best_context,
        memory=memory,
        parameters=parameters,
        reasons=reasons,
        # a single stream reads every weight and, on average, half of a full context's KV cache per token
        decode_tokens_per_s=decode_speed(
            hw,
            memory.part("weights").vram + memory.part("kv_cache").vram / 2,
            memory.part("weights").ram + memory.part("kv_cache").ram / 2,
        ),
        bits_per_weight=facts.bits_per_weight,
    )


def _bits(facts: ModelFacts) -> str:
    return f"{facts.bits_per_weight:.1f}" if facts.bits_per_weight else "unknown"


def vllm_supports(variant: Variant, gpu: GPUInfo) -> str | None:
    """Why vLLM cannot run this variant on this GPU, or None."""
    capability = gpu.compute_capability or (0, 0)
    if capability < (7, 0):
        return f"vLLM needs compute capability 7.0 or newer; {gpu.name} has {capability[0]}.{capability[1]}"
    if variant.name == "FP8" and capability < (8, 9):
        return (
            f"FP8 needs an Ada or Hopper GPU (compute capability 8.9+); {gpu.name} has {capability[0]}.{capability[1]}"
        )
    if variant.name == "BF16" and capability < (8, 0):
        return f"BF16 needs compute capability 8.0+; {gpu.name} would run it as FP16"
    return None


def _vllm_option(hw: HardwareProfile, budgets: Budgets, variant: Variant, need: Need) -> Option | str:
    if not budgets.gpus or budgets.unified:
        return "vLLM needs an NVIDIA GPU"
    gpu = budgets.gpus[0]
    problem = vllm_supports(variant, gpu)
    if problem:
        return problem
    facts = variant.facts
    max_len = need.context
    free = min(budgets.vram)
    utilization = round(min(0.9, free / gpu.memory_total), 2)
    tp = 1
    while True:
        memory = vllm_memory(
            facts, gpu.memory_total, max_model_len=max_len, gpu_memory_utilization=utilization, tensor_parallel=tp,
            max_num_batched_tokens=VLLM_BATCHED_TOKENS,
        )  # fmt: skip
        if (memory.kv_tokens or 0) >= max_len * need.users or tp * 2 > len(budgets.gpus):
            break
        tp *= 2
    # vLLM is chosen for concurrency: it fits when its KV cache holds every user's full context at once.
    fits = (memory.kv_tokens or 0) >= max_len * need.users and memory.ram <= budgets.ram
    concurrency = memory.max_concurrency or 0
    max_seqs = max(1, min(256, concurrency))
    reasons = (
        f"engine vLLM: continuous batching for {need.users} users on NVIDIA",
        f"quantization {variant.name}: {_bits(facts)} bits per weight",
        f"tensor parallel {tp}: {'one GPU holds it' if tp == 1 else f'weights and KV cache split over {tp} GPUs'}",
        f"max model length {max_len}: what the use asks for",
        f"gpu memory utilization {utilization}: vLLM's default 0.9, lowered to what is free"
        if utilization < 0.9
        else "gpu memory utilization 0.9: vLLM's default",
        f"KV cache {memory.kv_tokens} tokens: {concurrency} requests of {max_len} tokens at once",
        f"max sequences {max_seqs}: the concurrency the KV cache holds, at most 256",
        f"max batched tokens {VLLM_BATCHED_TOKENS}: the prefill chunk of one step, as the memory was profiled",
    )
    return Option(
        engine="vllm",
        variant=variant.name,
        location=variant.location,
        tier="gpu",
        fits=fits,
        context=max_len,
        max_context=min(memory.kv_tokens or 0, facts.trained_context or max_len),
        memory=memory,
        parameters={
            "tensor_parallel_size": tp,
            "max_model_len": max_len,
            "gpu_memory_utilization": utilization,
            "max_num_seqs": max_seqs,
            "max_num_batched_tokens": VLLM_BATCHED_TOKENS,
            "dtype": "bfloat16" if (gpu.compute_capability or (0, 0)) >= (8, 0) else "float16",
            "quantization": variant.name.lower() if variant.name in ("AWQ", "GPTQ", "FP8") else None,
        },
        reasons=reasons,
        decode_tokens_per_s=decode_speed(
            hw, memory.part("weights").vram + (facts.kv_bytes_per_token() or 0) * max_len / 2 / tp, 0
        ),
        bits_per_weight=facts.bits_per_weight,
    )


def _rank(option: Option, need: Need) -> tuple[bool, bool, bool, int, bool, float, int]:
    """Fitting first; vLLM first when several users are served, llama.cpp otherwise; usable quality (4+ bits);
    GPU over partial offload over CPU; reaching the context the use asks for; then the most bits per weight and
    the longest context. For long documents the context counts before the bits."""
    quality, context = -(option.bits_per_weight or 0), -option.context
    return (
        not option.fits,
        (option.engine == "vllm") != (need.users > 1),
        (option.bits_per_weight or 0) < LOW_QUALITY_BITS,
        {"gpu": 0, "partial": 1, "cpu": 2}[option.tier],
        option.context < need.context,
        *((context, quality) if need.use == "long-context" else (quality, context)),
    )


QualityLookup = Callable[[str, str | None], dict[str, Any] | None]


def _with_loss(option: Option, loss: dict[str, Any] | None, max_loss_pct: float | None) -> Option:
    reasons = option.reasons
    if over_threshold(loss, max_loss_pct) and loss is not None:
        reasons += (f"ranked lower: its measured quality loss ({loss['ppl_increase_pct']:+.2f} % perplexity) passes "
                    f"the threshold of {max_loss_pct} %",)  # fmt: skip
    return replace(option, quality_loss=loss, reasons=reasons)


def recommend(
    hw: HardwareProfile,
    variants: Sequence[Variant],
    use: str = "chat",
    *,
    users: int | None = None,
    correction: Correction | None = None,
    llama_server: bool = False,
    quality: QualityLookup | None = None,
    max_loss_pct: float | None = None,
) -> Recommendation:
    """Cost every variant on every engine that can run it and rank the options. `llama_server`: llama-server is
    available here, and serves GGUF models to several users at once. `quality`: each variant's expected quality
    loss (location, type); a fitting option whose measured loss passes `max_loss_pct` ranks below the others."""
    trained = max((v.facts.trained_context or 0 for v in variants), default=0) or None
    need = need_for(use, trained, users)
    budgets = Budgets.of(hw)
    options: list[Option] = []
    problems: list[str] = []
    for variant in variants:
        try:
            if variant.engine_family == "llama.cpp":
                correction = correction or Correction.none()
                options.append(_llama_option(hw, budgets, variant, need, correction, llama_server))
            else:
                result = _vllm_option(hw, budgets, variant, need)
                if isinstance(result, str):
                    problems.append(f"{variant.name}: {result}")
                else:
                    options.append(result)
        except MissingFacts as exc:
            problems.append(f"{variant.name}: {exc}")
    if quality is not None:
        options = [_with_loss(o, quality(o.location, o.variant), max_loss_pct) for o in options]
    options.sort(key=lambda o: (not o.fits, over_threshold(o.quality_loss, max_loss_pct), _rank(o, need)))
    best = options[0] if options and options[0].fits else None
    if best is None:
        problems.append(
            "Nothing fits in the free memory with a safety margin; see the alternatives for what is missing."
        )
    return Recommendation(
        use=use,
        best=best,
        alternatives=tuple(o for o in options if o is not best),
        problems=tuple(problems),
        budgets={"ram": budgets.ram, **{f"gpu{g.index}": v for g, v in zip(budgets.gpus, budgets.vram, strict=True)}},
    )
