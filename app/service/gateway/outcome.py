"""One request as the gateway serves it, what happened to it, and the record the request log keeps of it."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.service.gateway.tool_calls import ToolPlan
from app.service.gateway.validation import CheckedRequest
from app.service.http.asgi import DirectBody, Receive, Send, wait_disconnect
from app.service.metrics.metering import MeteredRequest, StreamMeter, ends_with_done, percentile, prompt_cache
from app.service.metrics.request_text import RequestText

_ID_PREFIX, _ids = uuid.uuid4().hex[:12], itertools.count(1)  # request ids: unique per run, cheap per request
CLIENT_CLOSED = 499  # nginx's convention for a client that left before the answer


@dataclass
class Outcome:
    """What happened to one request, filled in as it goes, recorded at the end."""

    status: int = 0
    queued_s: float = 0.0
    meter: StreamMeter | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_cached_tokens: int | None = None
    slot: int | None = None
    error: str | None = None
    complete: bool = False  # the engine's answer was passed on in full
    serving: bool = True  # until the handler is done with the request
    gone: bool = False  # the client disconnected while it was served
    text: RequestText | None = None  # only when the user keeps request text


@dataclass
class GatewayRequest:
    """One request to the gateway as it is served: what the client sent, where the answer goes, what happened."""

    path: str
    body: bytes  # as it goes upstream (rewritten for a slot, a remote's model id or an encoding)
    payload: dict[str, Any]
    checked: CheckedRequest
    send: Send
    direct: DirectBody | None  # the server's direct path to the client, when it has one
    outcome: Outcome
    tools: ToolPlan | None = None  # how calls are read out of the answer, for a request with tools


class StreamRewrite(Protocol):
    """Rewrites a stream's bytes read in any cuts: a remote's model name, tool calls."""

    def feed(self, chunk: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


@dataclass(frozen=True)
class StreamPlan:
    """What a stream needs besides passing bytes on."""

    headers: list[tuple[bytes, bytes]]  # the engine's, as far as they are passed on
    add_usage: bool  # the client asked for usage and the upstream will not send it
    rename: StreamRewrite | None  # the upstream names the model otherwise, or tool calls are rewritten


def relay_chunks(
    client: DirectBody,
    meter: StreamMeter,
    keep: Callable[[bytes], None] | None,
    outcome: Outcome,
    add_usage: bool,
) -> Callable[[bytes], bool]:
    """What `_stream`'s loop does with a chunk, done in the engine connection's callback; declines the chunk that
    ends the stream when a usage event is to be added before it (that needs a request to the engine)."""
    feed, write = meter.feed, client.write

    def relay(chunk: bytes) -> bool:
        finished = ends_with_done(chunk)
        if finished and add_usage:
            return False
        feed(chunk)
        if keep is not None:
            keep(chunk)
        # A client may leave as soon as it has read [DONE], before the engine closes the stream.
        outcome.complete = outcome.complete or finished
        write(chunk)
        return True

    return relay


async def cancel_when_gone(receive: Receive, handler: asyncio.Task[Any], outcome: Outcome) -> None:
    """Cancel `handler` if the client disconnects while its request is being served."""
    await wait_disconnect(receive)
    if outcome.serving:  # once the answer is sent, the server reports a disconnect too
        outcome.gone = True
        handler.cancel()


def read_usage(answer: bytes, outcome: Outcome) -> None:
    try:
        decoded = json.loads(answer)
        usage = decoded.get("usage") or {}
    except (ValueError, AttributeError, RecursionError):
        return
    if isinstance(usage, dict):
        outcome.prompt_tokens = usage.get("prompt_tokens")
        outcome.completion_tokens = usage.get("completion_tokens")
    cache = prompt_cache(usage, decoded.get("timings"))
    if outcome.prompt_tokens is None:  # llama-server's timings count the prompt too
        outcome.prompt_tokens = cache.prompt_tokens
    outcome.prompt_cached_tokens = cache.cached_tokens


def record_of(path: str, checked: CheckedRequest, outcome: Outcome, started_at: float, duration: float
            ) -> MeteredRequest:  # fmt: skip
    meter = outcome.meter
    itls = meter.inter_token_latencies() if meter else []
    completion = meter.completion_tokens if meter else outcome.completion_tokens
    prompt, cached = outcome.prompt_tokens, outcome.prompt_cached_tokens
    if meter is not None:
        cache = prompt_cache(meter.usage, meter.timings)
        prompt, cached = (meter.usage or {}).get("prompt_tokens", prompt), cache.cached_tokens
        if prompt is None:  # a stream without usage: llama-server's timings count the prompt too
            prompt = cache.prompt_tokens
    return MeteredRequest(
        id=f"{_ID_PREFIX}-{next(_ids)}",
        time=started_at,
        model=checked.model,
        route=path,
        stream=checked.stream,
        status=outcome.status,
        queued_s=outcome.queued_s,
        ttft_s=meter.ttft_s if meter else None,
        duration_s=duration,
        prompt_tokens=prompt,
        completion_tokens=completion,
        itl_p50_s=percentile(itls, 0.5),
        itl_max_s=max(itls) if itls else None,
        decode_tps=meter.decode_tps() if meter else None,
        error=outcome.error,
        prompt_cached_tokens=cached,
        slot=outcome.slot,
        streamed_tokens=meter.streamed_tokens if meter else 0,
    )
