"""Measurement from forwarded bytes, on SSE in the exact form llama-cpp-python's server writes it."""

from __future__ import annotations

import json

from app.service.metering import StreamMeter, ends_with_done, split_done, usage_event


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


def test_a_route_counts_the_content_key_of_its_own_events() -> None:
    chat = event({"content": "a"}) + event({"content": "b"})
    text = b'data: {"id": "cmpl-1", "choices": [{"index": 0, "text": "c", "finish_reason": null}]}\n\n'
    for route, expected in (("/v1/chat/completions", 2), ("/v1/completions", 1), (None, 3)):
        meter = StreamMeter(started=0.0, route=route)
        meter.feed(chat)
        meter.feed(text[:20])  # split: the rest of the event comes with the next read
        meter.feed(text[20:])
        assert meter.completion_tokens == expected, route
