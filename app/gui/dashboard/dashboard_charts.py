"""The dashboard's charts: which series each one draws and in which unit, and the colour and line each series is
drawn with."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2.0**30
# Colour-blind-safe (Okabe and Ito), one per model in the order models appear; machine-wide series take the
# palette's text colour, the service a grey.
MODEL_COLOURS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442")
SERVICE_COLOUR = "#8c8c8c"
# The second series of a pair in one chart (prompt beside generation, p95 beside p50, capacity beside use).
DASHED = {"prompt_tokens_per_s", "ttft_p95_s", "system_cpu_percent", "system_memory_used_bytes"}
DOTTED = {"gpu_memory_total_bytes", "gpu_memory_used_bytes"}


@dataclass(frozen=True)
class ChartSpec:
    """One chart: which series it draws and in which unit. Optional charts appear with their first series."""

    key: str
    title: str
    unit: str
    names: tuple[str, ...]
    scale: float = 1.0
    optional: bool = False


CHARTS = (
    ChartSpec("throughput", "Throughput", "tokens/s", ("generation_tokens_per_s", "prompt_tokens_per_s")),
    ChartSpec("ttft", "Time to first token", "ms", ("ttft_p50_s", "ttft_p95_s"), 1000.0),
    ChartSpec("cpu", "CPU", "%", ("process_cpu_percent", "system_cpu_percent")),
    ChartSpec("ram", "RAM", "GiB", ("process_rss_bytes", "system_memory_used_bytes"), 1 / GIB),
    ChartSpec("gpu", "GPU memory by process", "GiB",
              ("gpu_process_memory_bytes", "gpu_memory_used_bytes", "gpu_memory_total_bytes"), 1 / GIB, True),
    ChartSpec("kv", "KV cache", "%", ("engine_kv_cache_usage",), 100.0, True),
    # Prompt tokens served from the engine's cache over all prompt tokens: the multi-turn reuse slot routing is for.
    ChartSpec("cache", "Prompt cache reuse", "%", ("prompt_cache_reuse",), 100.0, True),
)  # fmt: skip
CHART_OF_NAME = {name: chart for chart in CHARTS for name in chart.names}
