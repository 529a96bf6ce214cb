"""Engine-native metrics in one vocabulary: a Prometheus text parser, one table per engine, and a translator
that turns counters into rates across scrapes.

Our names (what the dashboard charts): `kv_cache_usage` (0-1 fraction), `requests_running`, `requests_waiting`,
`prompt_tokens_per_s`, `generation_tokens_per_s`; where the engine reports them, `requests_prefill` and
`requests_decode` (the running requests by phase), `iteration_latency_s` (its last scheduler step) and
`gpu_memory_bytes` (the GPU memory it says it uses), and `draft_acceptance` (the share of drafted tokens the model
accepted, since the engine started, where it decodes speculatively). Rates always come from `_total` counters between
two scrapes:
llama-server's `*_tokens_seconds` gauges reset on every scrape, so two scrapers would each see half the truth.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


class Kind(enum.Enum):
    GAUGE = "gauge"  # reported as is (times `scale`)
    COUNTER = "counter"  # turned into a per-second rate between two scrapes


@dataclass(frozen=True)
class MetricRule:
    """One engine metric and the name it has in ModelDeck. Rules for one target are tried in order."""

    source: str
    target: str
    kind: Kind = Kind.GAUGE
    scale: float = 1.0


@dataclass(frozen=True)
class RatioRule:
    """One of our names as the ratio of two engine counters, since the engine started (when the second is not 0)."""

    numerator: str
    denominator: str
    target: str


@dataclass(frozen=True)
class MetricsConfig:
    """Where an engine serves Prometheus text, and how its names map to ours."""

    path: str
    rules: tuple[MetricRule, ...]
    ratios: tuple[RatioRule, ...] = ()


VLLM = MetricsConfig(
    "/metrics",
    (
        MetricRule("vllm:kv_cache_usage_perc", "kv_cache_usage"),
        # The name before vLLM 0.10; the same 0-1 fraction despite the `perc`.
        MetricRule("vllm:gpu_cache_usage_perc", "kv_cache_usage"),
        MetricRule("vllm:num_requests_running", "requests_running"),
        MetricRule("vllm:num_requests_waiting", "requests_waiting"),
        MetricRule("vllm:prompt_tokens_total", "prompt_tokens_per_s", Kind.COUNTER),
        MetricRule("vllm:generation_tokens_total", "generation_tokens_per_s", Kind.COUNTER),
    ),
)

_DRAFTED, _ACCEPTED = "llamacpp:spec_decode_num_draft_tokens_total", "llamacpp:spec_decode_num_accepted_tokens_total"
LLAMA_SERVER = MetricsConfig(
    "/metrics",
    (
        MetricRule("llamacpp:kv_cache_usage_ratio", "kv_cache_usage"),
        MetricRule("llamacpp:requests_processing", "requests_running"),
        MetricRule("llamacpp:requests_deferred", "requests_waiting"),
        MetricRule("llamacpp:prompt_tokens_total", "prompt_tokens_per_s", Kind.COUNTER),
        MetricRule("llamacpp:tokens_predicted_total", "generation_tokens_per_s", Kind.COUNTER),
    ),
    (RatioRule(_ACCEPTED, _DRAFTED, "draft_acceptance"),),
)

# SGLang (`--enable-metrics`): token_usage is the used share of its KV token pool, 0-1. Counters are split by
# is_streaming, which the parser sums.
SGLANG = MetricsConfig(
    "/metrics",
    (
        MetricRule("sglang:token_usage", "kv_cache_usage"),
        MetricRule("sglang:num_running_reqs", "requests_running"),
        MetricRule("sglang:num_queue_reqs", "requests_waiting"),
        MetricRule("sglang:prompt_tokens_total", "prompt_tokens_per_s", Kind.COUNTER),
        MetricRule("sglang:generation_tokens_total", "generation_tokens_per_s", Kind.COUNTER),
    ),
)

# TGI has no KV-cache gauge and no token counters: the sums of its per-request token histograms only grow, so
# their rates are the token throughput (counted as each request finishes).
TGI = MetricsConfig(
    "/metrics",
    (
        MetricRule("tgi_batch_current_size", "requests_running"),
        MetricRule("tgi_queue_size", "requests_waiting"),
        MetricRule("tgi_request_input_length_sum", "prompt_tokens_per_s", Kind.COUNTER),
        MetricRule("tgi_request_generated_tokens_sum", "generation_tokens_per_s", Kind.COUNTER),
    ),
)

# trtllm-serve serves Prometheus text at /prometheus/metrics (its /metrics is JSON iteration stats). Every gauge
# here but the token counters is filled from iteration statistics (`enable_iter_perf_stats`, engines.trtllm).
TRTLLM = MetricsConfig(
    "/prometheus/metrics",
    (
        MetricRule("trtllm_kv_cache_utilization", "kv_cache_usage"),
        MetricRule("trtllm_num_requests_running", "requests_running"),
        MetricRule("trtllm_num_requests_waiting", "requests_waiting"),
        MetricRule("trtllm_prompt_tokens_total", "prompt_tokens_per_s", Kind.COUNTER),
        MetricRule("trtllm_generation_tokens_total", "generation_tokens_per_s", Kind.COUNTER),
        MetricRule("trtllm_num_context_requests", "requests_prefill"),
        MetricRule("trtllm_num_generation_requests", "requests_decode"),
        MetricRule("trtllm_iteration_latency_seconds", "iteration_latency_s"),
        MetricRule("trtllm_gpu_memory_usage_bytes", "gpu_memory_bytes"),
    ),
)

# By engine name (engines.registry). llama-cpp-python's server has no /metrics, so it has no table.
METRICS_CONFIGS: dict[str, MetricsConfig] = {
    "vllm": VLLM,
    "llama-server": LLAMA_SERVER,
    "sglang": SGLANG,
    "tgi": TGI,
    "trtllm": TRTLLM,
}


def parse_prometheus(text: str) -> dict[str, float]:
    """Each metric name in Prometheus text exposition and the sum of its samples over all label sets.

    Summing is right for what the tables read: one engine serves one model, so label sets only split a
    counter by things such as the finish reason or the engine core. NaN samples are left out.
    """
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        name = match.group(1)
        values[name] = values.get(name, 0.0) + value
    return values


class MetricTranslator:
    """Translates one engine's scrapes. Keeps the previous counters, so use one translator per engine process."""

    def __init__(self, config: MetricsConfig) -> None:
        self.config = config
        self._previous: dict[str, float] = {}
        self._previous_time: float | None = None

    def translate(self, text: str, now: float) -> dict[str, float]:
        """Our names and values from one scrape taken at `now` (monotonic seconds).

        Rates need two scrapes: the first scrape yields gauges only. A counter that went down (the engine
        restarted) yields no rate for that interval rather than a negative one.
        """
        raw = parse_prometheus(text)
        out: dict[str, float] = {}
        elapsed = None if self._previous_time is None else now - self._previous_time
        for rule in self.config.rules:
            if rule.target in out or rule.source not in raw:
                continue
            value = raw[rule.source]
            if rule.kind is Kind.GAUGE:
                out[rule.target] = value * rule.scale
                continue
            before = self._previous.get(rule.source)
            if before is not None and elapsed is not None and elapsed > 0 and value >= before:
                out[rule.target] = (value - before) / elapsed * rule.scale
        for ratio in self.config.ratios:
            denominator = raw.get(ratio.denominator)
            if denominator and ratio.numerator in raw:
                out[ratio.target] = raw[ratio.numerator] / denominator
        self._previous = {rule.source: raw[rule.source] for rule in self.config.rules if rule.kind is Kind.COUNTER
                          and rule.source in raw}  # fmt: skip
        self._previous_time = now
        return out
