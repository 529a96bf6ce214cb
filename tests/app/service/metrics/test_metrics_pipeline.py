"""The metrics pipeline on the real service and bundled model: what was sent is what the series say."""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.client import ControlError
from app.hub.library import BUNDLED_ID
from tests.support.service import RunningService
from tests.support.waiting import wait_for


def series_of(service: RunningService, name: str, window: int = 120) -> list[dict[str, Any]]:
    answer = service.client.series(window, names=[name], model=BUNDLED_ID)
    series: list[dict[str, Any]] = answer["series"]
    return series


def wait_for_total(service: RunningService, name: str, expected: int, timeout_s: float = 15.0) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        found = series_of(service, name)
        return found[0] if found and found[0]["v"][-1] == expected else None

    series: dict[str, Any] = wait_for(reached, timeout_s, f"{name} to reach {expected}")
    return series


def test_token_counters_and_rates_match_what_was_sent(service: RunningService) -> None:
    client = service.openai_client()
    completion_sent = prompt_sent = 0
    for max_tokens in (5, 9, 13):
        answer = client.completions.create(model=BUNDLED_ID, prompt="Count: one, two,", max_tokens=max_tokens,
                                           temperature=0)  # fmt: skip
        assert answer.usage is not None
        completion_sent += answer.usage.completion_tokens
        prompt_sent += answer.usage.prompt_tokens
    stream = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=7, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    usage = [chunk.usage for chunk in stream if chunk.usage is not None][-1]
    completion_sent += usage.completion_tokens
    prompt_sent += usage.prompt_tokens

    totals = wait_for_total(service, "generation_tokens_total", completion_sent)
    # A stream's tokens are booked as they flow, its prompt once the request is logged: a tick may fall between.
    wait_for_total(service, "prompt_tokens_total", prompt_sent)
    # The rate series integrates back to the counter: each rate is tokens over the interval before its point.
    rates = series_of(service, "generation_tokens_per_s")[0]
    times = rates["t"]
    integrated = sum(v * (t1 - t0) for t0, t1, v in zip(times, times[1:], rates["v"][1:], strict=False))
    first_total = totals["v"][0]
    assert abs(integrated - (completion_sent - first_total)) < 0.05 * completion_sent + 1
    assert max(rates["v"]) > 0

    ttft = series_of(service, "ttft_p50_s")
    assert ttft and 0 < ttft[0]["v"][-1] < 10
    running = series_of(service, "requests_running")
    assert running and set(running[0]["v"]) <= {0.0, 1.0}


def test_process_and_machine_series_and_no_gpu_series_without_a_gpu(service: RunningService) -> None:
    wait_for(lambda: series_of(service, "process_rss_bytes"), 10, "the engine process's series")
    answer = service.client.series(60)
    names = {s["name"] for s in answer["series"]}
    assert {"system_cpu_percent", "system_memory_used_bytes", "process_cpu_percent"} <= names
    rss = series_of(service, "process_rss_bytes")[0]["v"][-1]
    assert 50 * 2**20 < rss < 8 * 2**30
    gpu_names = {name for name in names if name.startswith("gpu_")}
    hardware = service.client.hardware()
    if not [gpu for gpu in hardware["gpus"] if gpu["vendor"] == "nvidia"]:
        assert gpu_names == set()  # no fake GPU series where there is no GPU
    assert answer["sampler"]["ticks"] >= 1
    assert answer["sampler"]["cpu_s"] / answer["sampler"]["ticks"] < 0.05


def test_live_sample_events_on_the_event_stream(service: RunningService) -> None:
    stream = service.client.events()
    try:
        for event in stream:
            if event["type"] == "sample":
                names = {point[0] for point in event["points"]}
                assert "system_cpu_percent" in names
                break
    finally:
        stream.close()


def test_series_rejects_bad_windows(service: RunningService) -> None:
    for window in (0, 10**9):
        with pytest.raises(ControlError, match="window"):
            service.client.series(window)


def test_generation_rate_is_booked_per_chunk_while_a_stream_flows(service: RunningService) -> None:
    """A long stream reads as a plateau: most of its tokens are booked in ticks before its last chunk, not all
    at once after it ended."""
    client = service.openai_client()
    # SmolLM2's end tokens (0 and 2) are barred, so that the stream lasts its max_tokens.
    stream = client.completions.create(model=BUNDLED_ID, prompt="1, 2, 3, 4, 5, 6,", max_tokens=640, temperature=0,
                                       logit_bias={"0": -100, "2": -100}, stream=True,
                                       stream_options={"include_usage": True})  # fmt: skip
    arrivals: list[float] = []
    completion = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            arrivals.append(time.time())
        if chunk.usage is not None:
            completion = chunk.usage.completion_tokens
    assert completion > 100 and arrivals[-1] - arrivals[0] > 2.5, "the stream was too short to show a plateau"
    wait_for_total(service, "generation_tokens_total", completion)
    rates = series_of(service, "generation_tokens_per_s")[0]
    times, values = rates["t"], rates["v"]
    # Each rate point books the tokens of the interval before it.
    booked_before_end = sum(
        v * (t1 - t0) for t0, t1, v in zip(times, times[1:], values[1:], strict=False) if t1 < arrivals[-1] - 1.0
    )
    assert booked_before_end > 0.4 * completion, (booked_before_end, completion, rates)
    during = [v for t, v in zip(times, values, strict=True) if arrivals[0] + 1.0 < t < arrivals[-1] - 1.0]
    assert during and min(during) > 0, f"a gap inside the stream: {during}"
