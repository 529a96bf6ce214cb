"""Per-request measurement from the bytes the gateway forwards, the same way for every engine.

TTFT is the time to the first streamed event that carries generated content (role-only chunks and keep-alive
comments do not count); inter-token latency is the gap between content events. SSE is parsed only as far as
that needs: events are found by their blank-line ends and searched as bytes; only usage events are decoded.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

_CONTENT = re.compile(rb'"(?:content|text)": ?"(?:[^"\\]|\\.)')
# One key per route: a pattern that starts with a whole literal is searched for as a string, about twice as fast
# as the alternation, and this runs on every chunk.
_ROUTE_CONTENT = {
    "/v1/chat/completions": re.compile(rb'"content": ?"(?:[^"\\]|\\.)'),
    "/v1/completions": re.compile(rb'"text": ?"(?:[^"\\]|\\.)'),
}
# usage, and llama-server's `timings` (on the last event, with `cache_n`): one search for both, as on every chunk
_USAGE = re.compile(rb'"(?:usage|timings)": ?\{')
_DONE = b"data: [DONE]"


@dataclass(frozen=True)
class MeteredRequest:
    """One request through the gateway. Times in seconds; unknown values are None. No prompt or output text."""

    id: str
    time: float
    model: str
    route: str
    stream: bool
    status: int
    queued_s: float
    ttft_s: float | None
    duration_s: float
    prompt_tokens: int | None
    completion_tokens: int | None
    itl_p50_s: float | None
    itl_max_s: float | None
    decode_tps: float | None
    error: str | None
    prompt_cached_tokens: int | None = None  # prompt tokens the engine took from its cache, if it says
    slot: int | None = None  # the engine slot the gateway chose (app.service.gateway.slot_router)
    streamed_tokens: int = 0  # content events already booked while the stream flowed (StreamMeter.on_tokens)


class StreamMeter:
    """Watches one streamed response: content events, their times, and usage if the engine sends it."""

    def __init__(
        self, started: float, route: str | None = None, on_tokens: Callable[[int], None] | None = None
    ) -> None:
        """`route`: the path streamed, whose events carry their content under one key; None: either key.
        `on_tokens`: called with each chunk's count of content events, so that rates are booked as a stream
        flows (a long stream then reads as a plateau, not as a spike at its end)."""
        self.started = started
        self.on_tokens = on_tokens
        self.token_times: list[float] = []
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.first_event: dict[str, Any] | None = None  # id, object, model: for a usage chunk we add
        self._carry = b""
        self._content = _ROUTE_CONTENT.get(route or "", _CONTENT)

    def feed(self, chunk: bytes) -> None:
        now = time.monotonic()
        if not self._carry and chunk.endswith(b"\n\n"):  # whole events, as engines write them: no copies
            complete = chunk
        else:
            data = self._carry + chunk if self._carry else chunk
            end = data.rfind(b"\n\n")
            if end < 0:
                self._carry = data
                return
            complete, self._carry = data[: end + 2], data[end + 2 :]
        if self.first_event is None and complete.startswith(b"data: {"):
            self._read_first(complete)
        found = len(self._content.findall(complete))
        if found:
            self.token_times.extend([now] * found)
            if self.on_tokens is not None:
                self.on_tokens(found)
        if _USAGE.search(complete):
            self._read_usage(complete)

    def _read_first(self, events: bytes) -> None:
        try:
            first = json.loads(events[6 : events.index(b"\n\n")])
        except ValueError:
            first = {}
        self.first_event = first if isinstance(first, dict) else {}

    def _read_usage(self, events: bytes) -> None:
        for event in events.split(b"\n\n"):
            if event.startswith(b"data: {") and _USAGE.search(event):
                try:
                    decoded = json.loads(event[6:])
                except ValueError:
                    continue
                usage, timings = decoded.get("usage"), decoded.get("timings")
                if isinstance(usage, dict):
                    self.usage = usage
                if isinstance(timings, dict):
                    self.timings = timings

    @property
    def streamed_tokens(self) -> int:
        """Content events reported to `on_tokens` so far (none without it)."""
        return len(self.token_times) if self.on_tokens is not None else 0

    @property
    def ttft_s(self) -> float | None:
        return self.token_times[0] - self.started if self.token_times else None

    @property
    def completion_tokens(self) -> int:
        counted = self.usage.get("completion_tokens") if self.usage else None
        return counted if isinstance(counted, int) else len(self.token_times)

    def inter_token_latencies(self) -> list[float]:
        times = self.token_times
        return [later - earlier for earlier, later in itertools.pairwise(times)]

    def decode_tps(self) -> float | None:
        times = self.token_times
        if len(times) < 2 or times[-1] <= times[0]:
            return None
        return (len(times) - 1) / (times[-1] - times[0])


@dataclass(frozen=True)
class PromptCache:
    """How much of a request's prompt the engine served from its cache. Unknown values are None."""

    prompt_tokens: int | None
    cached_tokens: int | None


def prompt_cache(usage: Any, timings: Any) -> PromptCache:
    """From what the engine reported: OpenAI's `usage.prompt_tokens_details.cached_tokens`, else llama-server's
    `timings` (`cache_n` tokens taken from the cache, `prompt_n` computed). An engine that reports neither leaves
    the cached count unknown: never a guess."""
    usage = usage if isinstance(usage, dict) else {}
    prompt = usage.get("prompt_tokens")
    prompt = prompt if _count(prompt) else None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if _count(cached):
        return PromptCache(prompt, cached)
    if isinstance(timings, dict) and _count(timings.get("cache_n")) and _count(timings.get("prompt_n")):
        cache_n, prompt_n = timings["cache_n"], timings["prompt_n"]
        return PromptCache(prompt if prompt is not None else cache_n + prompt_n, cache_n)
    return PromptCache(prompt, None)


def cache_reuse(counts: Iterable[tuple[int | None, int | None]]) -> tuple[int, float] | None:
    """Cached prompt tokens and their share of the prompt tokens, over the (cached, prompt) counts of requests
    whose engine reported both; None when none did."""
    cached_total = prompt_total = 0
    for cached, prompt in counts:
        if cached is not None and prompt:
            cached_total, prompt_total = cached_total + cached, prompt_total + prompt
    return (cached_total, cached_total / prompt_total) if prompt_total else None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def ends_with_done(chunk: bytes) -> bool:
    return chunk[-32:].rstrip().endswith(_DONE)  # only the tail: this runs on every chunk


def split_done(chunk: bytes) -> tuple[bytes, bytes]:
    """Split a chunk ending in the `data: [DONE]` event into what comes before it and the event itself."""
    index = chunk.rfind(_DONE)
    return chunk[:index], chunk[index:]


def usage_event(template: dict[str, Any] | None, prompt_tokens: int | None, completion_tokens: int) -> bytes:
    """The final chunk OpenAI sends for `stream_options.include_usage`: no choices, the request's usage."""
    total = None if prompt_tokens is None else prompt_tokens + completion_tokens
    chunk = {
        "id": (template or {}).get("id", ""),
        "object": (template or {}).get("object", "chat.completion.chunk"),
        "created": (template or {}).get("created", int(time.time())),
        "model": (template or {}).get("model", ""),
        "choices": [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total},
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]
