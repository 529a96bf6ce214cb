"""What vLLM's start-up log says about a launch: KV cache capacity in tokens, the maximum concurrency, and how long
loading the weights took and how much GPU memory they hold.

The patterns follow the logger format strings of vLLM 0.34.0 (tests/fixtures/logs/vllm_startup.log names the source
line of each). Every line vLLM logs starts with `(<process> pid=<pid>) LEVEL MM-DD HH:MM:SS [file:line]`; the
patterns search past that prefix so a changed prefix does not hide a known message. Numbers may carry thousands
separators (vLLM formats token counts with `{:,}`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any

GIB = 1 << 30

# vllm/v1/core/kv_cache_utils.py (update_kv_cache_capacity):
#   "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
_KV_CACHE = re.compile(
    r"KV cache size: (?P<tokens>[\d,]+) tokens, Maximum concurrency for (?P<length>[\d,]+) tokens per request: "
    r"(?P<concurrency>[\d.]+)x"
)
# vllm/v1/worker/gpu/model_runner.py (load_model): "Model loading took %s GiB memory and %.6f seconds"
_MODEL_LOAD = re.compile(r"Model loading took (?P<gib>[\d.]+) GiB memory and (?P<seconds>[\d.]+) seconds")
# vllm/v1/worker/gpu_worker.py (determine_available_memory): "Available KV cache memory: %s GiB"
_KV_MEMORY = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
# vllm/v1/engine/core.py (_initialize_kv_caches): "init engine (profile, create kv cache, warmup model) took %.2f s"
_INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) s")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class VLLMStartup:
    """Facts vLLM reported while starting; None until its log has said them. Memory figures are per GPU: with
    tensor parallelism every worker logs its own share, and the largest is kept (the GPU that fills first)."""

    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # requests of `concurrency_length` tokens the KV cache holds at once
    concurrency_length: int | None = None
    model_load_bytes: int | None = None
    model_load_s: float | None = None
    kv_cache_bytes: int | None = None
    init_engine_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> list[str]:
        """The facts in words, for the Run page and `modeldeck ps`."""
        lines = []
        if self.kv_cache_tokens is not None:
            lines.append(f"KV cache: {self.kv_cache_tokens:,} tokens")
        if self.max_concurrency is not None and self.concurrency_length is not None:
            lines.append(f"up to {self.max_concurrency:.2f} requests of {self.concurrency_length:,} tokens at once")
        if self.model_load_bytes is not None and self.model_load_s is not None:
            lines.append(f"weights: {self.model_load_bytes / GIB:.2f} GiB per GPU, loaded in {self.model_load_s:.1f} s")
        if self.kv_cache_bytes is not None:
            lines.append(f"KV cache memory: {self.kv_cache_bytes / GIB:.2f} GiB per GPU")
        if self.init_engine_s is not None:
            lines.append(f"engine initialised in {self.init_engine_s:.1f} s (profiling, KV cache, warm-up)")
        return lines


def _larger(current: int | None, new: int) -> int:
    return new if current is None else max(current, new)


def parse_line(startup: VLLMStartup, line: str) -> VLLMStartup:
    """`startup` updated with what one log line says (the same object when it says nothing known)."""
    if "took" not in line and "KV cache" not in line:
        return startup  # most lines: one cheap test instead of four searches
    if match := _KV_CACHE.search(line):
        return replace(
            startup,
            kv_cache_tokens=int(_number(match["tokens"])),
            concurrency_length=int(_number(match["length"])),
            max_concurrency=_number(match["concurrency"]),
        )
    if match := _MODEL_LOAD.search(line):
        return replace(
            startup,
            model_load_bytes=_larger(startup.model_load_bytes, int(_number(match["gib"]) * GIB)),
            model_load_s=max(startup.model_load_s or 0.0, _number(match["seconds"])),
        )
    if match := _KV_MEMORY.search(line):
        return replace(startup, kv_cache_bytes=_larger(startup.kv_cache_bytes, int(_number(match["gib"]) * GIB)))
    if match := _INIT_ENGINE.search(line):
        return replace(startup, init_engine_s=_number(match["seconds"]))
    return startup


def parse_startup(lines: list[str]) -> VLLMStartup:
    """Everything a whole start-up log says."""
    startup = VLLMStartup()
    for line in lines:
        startup = parse_line(startup, line)
    return startup


__all__ = ["VLLMStartup", "parse_line", "parse_startup"]
