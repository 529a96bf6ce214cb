"""Measurement from forwarded bytes, on SSE in the exact form llama-cpp-python's server writes it."""

from __future__ import annotations

import json

import pytest

from app.service.metrics.metering import (
    PromptCache,
    StreamMeter,
    cache_reuse,
    ends_with_done,
    prompt_cache,
    split_done,
    usage_event,
)


def event(delta: dict[str, str], finish: str | None = None) -> bytes:
    chunk = {"id": "chatcmpl-1", "model": "m", "created": 1, "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n".replace(b"\r", b"")


def test_role_chunks_and_keepalives_are_not_tokens() -> None:
    meter = StreamMeter(started=0.0)
    meter.feed(b": ping\n\n" + event({"role": "assistant"}))
    assert meter.ttft_s is None
    meter.feed(event({"content": "Hel"}) + event({"content": "lo"}))
    meter.feed(event({"content": ""}))  # empty content is no token
    meter.feed(event({}, finish="stop") + b"data: [DONE]\n\n")
    assert meter.completion_tokens == 2
    assert meter.ttft_s is not None and meter.ttft_s > 0
    assert meter.first_event is not None and meter.first_event["id"] == "chatcmpl-1"


def test_events_split_across_reads_are_counted_once() -> None:
    meter = StreamMeter(started=0.0)
    whole = event({"content": "a \\" + '"quoted\\" word'}) + event({"content": "b"})
    for index in range(0, len(whole), 7):
        meter.feed(whole[index : index + 7])
    assert meter.completion_tokens == 2


def test_engine_usage_wins_over_counting() -> None:
    meter = StreamMeter(started=0.0)
    meter.feed(event({"content": "x"}))
    meter.feed(b'data: {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}}\n\n')
    assert meter.completion_tokens == 9
    assert meter.usage == {"prompt_tokens": 5, "completion_tokens": 9}


def test_usage_event_goes_before_done() -> None:
    chunk = event({}, finish="length") + b"data: [DONE]\n\n"
    assert ends_with_done(chunk)
    _, done = split_done(chunk)
    assert done == b"data: [DONE]\n\n"
    usage = json.loads(usage_event({"id": "c1", "model": "m", "object": "chat.completion.chunk"}, 7, 3)[6:])
    assert usage["choices"] == [] and usage["id"] == "c1"
    assert usage["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_llama_server_timings_on_the_last_event_give_the_cached_prompt_tokens() -> None:
    """The last event of a llama-server stream without include_usage: finish_reason and `timings`."""
    meter = StreamMeter(started=0.0)
    meter.feed(event({"content": "x"}))
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "object": "chat.completion.chunk",
            "timings": {"cache_n": 120, "prompt_n": 30, "prompt_ms": 80.5, "predicted_n": 1}}  # fmt: skip
    meter.feed(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
    assert meter.timings is not None and meter.usage is None
    assert prompt_cache(meter.usage, meter.timings) == PromptCache(prompt_tokens=150, cached_tokens=120)


def test_openai_cached_tokens_win_and_unknown_stays_unknown() -> None:
    usage = {"prompt_tokens": 200, "prompt_tokens_details": {"cached_tokens": 150}}
    assert prompt_cache(usage, {"cache_n": 1, "prompt_n": 1}) == PromptCache(200, 150)
    assert prompt_cache({"prompt_tokens": 200}, None) == PromptCache(200, None)  # e.g. llama-cpp-python
    assert prompt_cache({"prompt_tokens": 200, "prompt_tokens_details": None}, None) == PromptCache(200, None)
    assert prompt_cache(None, {"cache_n": "12", "prompt_n": 3}) == PromptCache(None, None)  # not counts
    assert prompt_cache(None, {"cache_n": -1, "prompt_n": 3}) == PromptCache(None, None)
    assert prompt_cache(None, None) == PromptCache(None, None)


def test_cache_reuse_counts_only_requests_that_report_it() -> None:
    assert cache_reuse([(None, 100), (None, None)]) is None
    assert cache_reuse([]) is None
    cached, share = cache_reuse([(90, 100), (None, 1000), (0, 100), (10, 0)]) or (0, 0.0)
    assert cached == 90 and share == pytest.approx(0.45)


def test_a_route_counts_the_content_key_of_its_own_events() -> None:
    chat = event({"content": "a"}) + event({"content": "b"})
    text = b'data: {"id": "cmpl-1", "choices": [{"index": 0, "text": "c", "finish_reason": null}]}\n\n'
    for route, expected in (("/v1/chat/completions", 2), ("/v1/completions", 1), (None, 3)):
        meter = StreamMeter(started=0.0, route=route)
        meter.feed(chat)
        meter.feed(text[:20])  # split: the rest of the event comes with the next read
        meter.feed(text[20:])
        assert meter.completion_tokens == expected, route
