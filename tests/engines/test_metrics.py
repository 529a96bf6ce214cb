"""Engine metrics in ModelDeck's names: vLLM from a recorded exposition (both KV-cache names), llama-server
rates from its `_total` counters across scrapes, never from the gauges that reset on every scrape."""

from __future__ import annotations

from pathlib import Path

import pytest

from engines.metrics import LLAMA_SERVER, METRICS_CONFIGS, VLLM, MetricTranslator, parse_prometheus

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"


@pytest.mark.parametrize("fixture", ["vllm_metrics.txt", "vllm_metrics_old.txt"])
def test_vllm_gauges_in_our_names_for_both_kv_cache_names(fixture: str) -> None:
    translator = MetricTranslator(VLLM)
    values = translator.translate((FIXTURES / fixture).read_text(encoding="utf-8"), now=100.0)
    # The first scrape has no rates: a counter alone says nothing about speed.
    assert values == {"kv_cache_usage": 0.425, "requests_running": 3.0, "requests_waiting": 2.0}


def test_vllm_rates_from_counters_across_two_scrapes() -> None:
    first = (FIXTURES / "vllm_metrics.txt").read_text(encoding="utf-8")
    second = first.replace("} 1200.0", "} 1500.0").replace("} 3400.0", "} 3900.0")
    translator = MetricTranslator(VLLM)
    translator.translate(first, now=10.0)
    values = translator.translate(second, now=12.0)
    assert values["prompt_tokens_per_s"] == pytest.approx(150.0)
    assert values["generation_tokens_per_s"] == pytest.approx(250.0)


def test_parser_sums_label_sets_and_skips_comments_and_nan() -> None:
    text = 'a_total{x="1"} 2\na_total{x="2"} 3.5\n# TYPE b gauge\nb NaN\nc 1e3 1700000000000\n'
    assert parse_prometheus(text) == {"a_total": 5.5, "c": 1000.0}


def llama_server_scrape(prompt_total: int, predicted_total: int, processing: int) -> str:
    # llama-server's own layout (tools/server/server.cpp, --metrics): the *_seconds gauges are per-scrape
    # averages that reset when read, which is why they must not be used.
    return f"""# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt_total}
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 1.5
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {predicted_total}
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 0
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 0
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {processing}
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""


def test_llama_server_rates_from_total_counters_across_scrapes() -> None:
    translator = MetricTranslator(LLAMA_SERVER)
    first = translator.translate(llama_server_scrape(100, 40, 1), now=50.0)
    assert "generation_tokens_per_s" not in first
    second = translator.translate(llama_server_scrape(300, 240, 2), now=54.0)
    third = translator.translate(llama_server_scrape(300, 290, 0), now=55.0)
    assert second == {"requests_running": 2.0, "requests_waiting": 0.0,
                      "prompt_tokens_per_s": 50.0, "generation_tokens_per_s": 50.0}  # fmt: skip
    assert third["prompt_tokens_per_s"] == 0.0
    assert third["generation_tokens_per_s"] == 50.0


def test_a_restarted_engine_gives_no_negative_rate() -> None:
    translator = MetricTranslator(LLAMA_SERVER)
    translator.translate(llama_server_scrape(1000, 800, 0), now=1.0)
    after_restart = translator.translate(llama_server_scrape(10, 5, 0), now=2.0)
    assert "generation_tokens_per_s" not in after_restart
    assert translator.translate(llama_server_scrape(20, 25, 0), now=3.0)["generation_tokens_per_s"] == 20.0


def test_every_table_names_only_our_vocabulary() -> None:
    ours = {
        "kv_cache_usage",
        "requests_running",
        "requests_waiting",
        "prompt_tokens_per_s",
        "generation_tokens_per_s",
        "requests_prefill",
        "requests_decode",
        "iteration_latency_s",
        "gpu_memory_bytes",
    }
    for config in METRICS_CONFIGS.values():
        assert {rule.target for rule in config.rules} <= ours


def bump(text: str, name: str, delta: float) -> str:
    """The exposition with `delta` added to the first sample of `name` (one label set of a split counter)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith((name + "{", name + " ")):
            sample, _, number = line.rpartition(" ")
            lines[i] = f"{sample} {float(number) + delta}"
            break
    return "\n".join(lines)


COUNTERS = {
    "sglang": ("sglang:prompt_tokens_total", "sglang:generation_tokens_total"),
    "trtllm": ("trtllm_prompt_tokens_total", "trtllm_generation_tokens_total"),
    "tgi": ("tgi_request_input_length_sum", "tgi_request_generated_tokens_sum"),
}


@pytest.mark.parametrize(
    ("engine", "fixture", "gauges"),
    [
        ("sglang", "sglang_metrics.txt", {"kv_cache_usage": 0.425, "requests_running": 3.0, "requests_waiting": 2.0}),
        (
            "trtllm",
            "trtllm_metrics.txt",
            {
                "kv_cache_usage": 0.425,
                "requests_running": 3.0,
                "requests_waiting": 2.0,
                "requests_prefill": 1.0,
                "requests_decode": 2.0,
                "iteration_latency_s": 0.021,
                "gpu_memory_bytes": 12 * 2.0**30,
            },
        ),
        ("tgi", "tgi_metrics.txt", {"requests_running": 3.0, "requests_waiting": 2.0}),  # TGI has no KV gauge
    ],
)
def test_other_engines_in_our_names(engine: str, fixture: str, gauges: dict[str, float]) -> None:
    """SGLang, TensorRT-LLM and TGI expositions written from their sources' metric definitions (see each
    fixture's header): the gauges on the first scrape, token rates from the counters across two."""
    first = (FIXTURES / fixture).read_text(encoding="utf-8")
    translator = MetricTranslator(METRICS_CONFIGS[engine])
    assert translator.translate(first, now=10.0) == gauges
    prompt, generated = COUNTERS[engine]
    assert (parse_prometheus(first)[prompt], parse_prometheus(first)[generated]) == (1200.0, 3400.0)
    # 300 more prompt and 500 more generated tokens in 2 s, in one label set of each counter.
    values = translator.translate(bump(bump(first, prompt, 300), generated, 500), now=12.0)
    assert values["prompt_tokens_per_s"] == pytest.approx(150.0)
    assert values["generation_tokens_per_s"] == pytest.approx(250.0)
