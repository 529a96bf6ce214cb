"""A lean streaming load generator for an OpenAI-compatible endpoint: one concurrency level at a time.

TTFT is measured to the first streamed chunk that carries generated content (role-only chunks and keep-alive
comments do not count), as `vllm bench serve` does; inter-token latency is the gap between content chunks.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

REQUEST_TIMEOUT_S = 600.0
Messages = list[dict[str, str]]


class LoadError(Exception):
    """The endpoint refused a request the benchmark cannot do without (the token count before the sweep)."""


@dataclass
class RequestResult:
    """One request: times in seconds from its start; `error` is None when it succeeded. `turn` is its turn (1, 2,
    ...) in a multi-turn run, else None; `text` the answer, kept only where a later turn needs it."""

    ttft_s: float | None = None
    token_times: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    duration_s: float = 0.0
    error: str | None = None
    turn: int | None = None
    text: str = ""

    def inter_token_latencies(self) -> list[float]:
        times = self.token_times
        return [later - earlier for earlier, later in itertools.pairwise(times)]


@dataclass(frozen=True)
class LoadSpec:
    """What to send: `requests` requests, `concurrency` at once, request `i` with the user message `prompt(i)`."""

    base_url: str  # .../v1
    api_key: str | None
    model: str
    concurrency: int
    requests: int
    output_tokens: int
    prompt: Callable[[int], str]
    cert_path: str | None = None  # the endpoint's TLS certificate, trusted besides the system's (app.service.http.tls)


def _tls_context(cert_path: str) -> ssl.SSLContext:
    context = ssl.create_default_context()  # the system's authorities, and the endpoint's certificate besides
    context.load_verify_locations(cafile=cert_path)
    return context


@dataclass(frozen=True)
class ConversationSpec:
    """Multi-turn load: `conversations` conversations of `turns` turns, at most `concurrency` requests at once.
    Conversations take turns in order (1, 2, ..., then 1 again), as users sharing a server do; each turn sends the
    whole history, the previous answer included, and a new user message: `first(c)`, then `follow_up(c, turn)`."""

    base_url: str
    api_key: str | None
    model: str
    concurrency: int
    conversations: int
    turns: int
    output_tokens: int
    first: Callable[[int], str]
    follow_up: Callable[[int, int], str]
    cert_path: str | None = None  # as LoadSpec's


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _delta_text(event: dict[str, Any]) -> str:
    """The generated text an event carries ("" for role-only chunks)."""
    parts = []
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        for text in (delta.get("content"), choice.get("text"), delta.get("reasoning_content")):
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


async def _one_request(
    session: aiohttp.ClientSession,
    base_url: str,
    api_key: str | None,
    body: dict[str, Any],
    keep_text: bool = False,
) -> RequestResult:
    result = RequestResult()
    kept: list[str] = []
    started = time.perf_counter()
    try:
        async with session.post(f"{base_url}/chat/completions", json=body, headers=_headers(api_key)) as response:
            if response.status != 200:
                result.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return result
            async for line in response.content:
                if not line.startswith(b"data: {"):
                    continue  # blank separators, keep-alive comments and [DONE]
                event = json.loads(line[6:])
                text = _delta_text(event)
                if text:
                    now = time.perf_counter() - started
                    result.token_times.append(now)
                    if result.ttft_s is None:
                        result.ttft_s = now
                    if keep_text:
                        kept.append(text)
                usage = event.get("usage")
                if isinstance(usage, dict):
                    result.output_tokens = int(usage.get("completion_tokens") or 0)
                    result.prompt_tokens = usage.get("prompt_tokens")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.duration_s = time.perf_counter() - started
    if result.error is None and result.output_tokens == 0:
        result.output_tokens = len(result.token_times)  # the server sent no usage: count content chunks
    result.text = "".join(kept)
    return result


def _body(model: str, messages: Messages, output_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": messages,
        "max_tokens": output_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _session(cert_path: str | None = None) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, ssl=_tls_context(cert_path) if cert_path else True)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))


async def run_level(
    spec: LoadSpec, on_result: Callable[[RequestResult], None] | None = None
) -> tuple[list[RequestResult], float]:
    """Send `spec.requests` requests with at most `spec.concurrency` in flight; return them and the wall time.

    `on_result` hears of each request as it finishes (on the event loop: keep it quick)."""
    pending = iter(range(spec.requests))
    results: list[RequestResult] = []
    async with _session(spec.cert_path) as session:

        async def worker() -> None:
            for index in pending:  # the shared iterator hands each request to exactly one worker
                messages = [{"role": "user", "content": spec.prompt(index)}]
                body = _body(spec.model, messages, spec.output_tokens)
                result = await _one_request(session, spec.base_url, spec.api_key, body)
                results.append(result)
                if on_result is not None:
                    on_result(result)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(spec.concurrency, spec.requests))))
        return results, time.perf_counter() - started


async def run_conversations(
    spec: ConversationSpec, on_result: Callable[[RequestResult], None] | None = None
) -> tuple[list[RequestResult], float]:
    """Run every turn of every conversation; return the requests (each with its turn) and the wall time.

    A failed turn ends its conversation: its later turns are reported as failed too, unsent."""
    ready: asyncio.Queue[int | None] = asyncio.Queue()
    for conversation in range(spec.conversations):
        ready.put_nowait(conversation)
    histories: list[Messages] = [[] for _ in range(spec.conversations)]
    next_turn = [1] * spec.conversations
    results: list[RequestResult] = []
    workers = min(spec.concurrency, spec.conversations)
    ended = 0

    def finish(result: RequestResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    async with _session(spec.cert_path) as session:

        async def worker() -> None:
            nonlocal ended
            while (conversation := await ready.get()) is not None:
                turn = next_turn[conversation]
                text = spec.first(conversation) if turn == 1 else spec.follow_up(conversation, turn)
                asked = {"role": "user", "content": text}
                body = _body(spec.model, [*histories[conversation], asked], spec.output_tokens)
                result = await _one_request(session, spec.base_url, spec.api_key, body, keep_text=True)
                result.turn = turn
                finish(result)
                if result.error is not None:
                    for unsent in range(turn + 1, spec.turns + 1):
                        finish(RequestResult(error=f"not sent: turn {turn} of its conversation failed", turn=unsent))
                    next_turn[conversation] = spec.turns + 1
                else:
                    histories[conversation] += [asked, {"role": "assistant", "content": result.text}]
                    next_turn[conversation] = turn + 1
                if next_turn[conversation] <= spec.turns:
                    ready.put_nowait(conversation)  # to the back of the line: the others take their turns first
                else:
                    ended += 1
                    if ended == spec.conversations:
                        for _ in range(workers):
                            ready.put_nowait(None)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(workers)))
        return results, time.perf_counter() - started


async def count_prompt_tokens(
    base_url: str, api_key: str | None, model: str, text: str, cert_path: str | None = None
) -> int | None:
    """How many prompt tokens the engine counts for one user message (chat template included), from the usage of
    a one-token answer; None when the endpoint reports no usage. A refused request raises LoadError."""
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0}
    try:
        async with (
            _session(cert_path) as session,
            session.post(f"{base_url}/chat/completions", json=body, headers=_headers(api_key)) as response,
        ):
            if response.status != 200:
                raise LoadError(f"HTTP {response.status}: {(await response.text())[:200]}")
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise LoadError(f"{type(exc).__name__}: {exc}") from None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
