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
# Words that tokenize to about one token each in common vocabularies, so N words make about N prompt tokens.
_WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the", "red", "door")


def prompt_text(tokens: int) -> str:
    """A prompt of about `tokens` tokens that asks for a long answer, so generation rarely stops early."""
    filler = " ".join(_WORDS[i % len(_WORDS)] for i in range(max(0, tokens - 12)))
    return f"{filler}\nCount upwards from one, in words, without stopping:"


@dataclass
class RequestResult:
    """One request: times in seconds from its start; `error` is None when it succeeded."""

    ttft_s: float | None = None
    token_times: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    duration_s: float = 0.0
    error: str | None = None

    def inter_token_latencies(self) -> list[float]:
        times = self.token_times
        return [later - earlier for earlier, later in itertools.pairwise(times)]


@dataclass(frozen=True)
class LoadSpec:
    """What to send: the same request `requests` times, `concurrency` at once."""

    base_url: str  # .../v1
    api_key: str | None
    model: str
    concurrency: int
    requests: int
    prompt_tokens: int
    output_tokens: int
    cert_path: str | None = None  # the endpoint's TLS certificate, trusted besides the system's (app.service.tls)


def _tls_context(cert_path: str) -> ssl.SSLContext:
    context = ssl.create_default_context()  # the system's authorities, and the endpoint's certificate besides
    context.load_verify_locations(cafile=cert_path)
    return context


def _has_content(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or choice.get("text") or delta.get("reasoning_content"):
            return True
    return False


async def _one_request(session: aiohttp.ClientSession, spec: LoadSpec) -> RequestResult:
    result = RequestResult()
    body = {
        "model": spec.model,
        "messages": [{"role": "user", "content": prompt_text(spec.prompt_tokens)}],
        "max_tokens": spec.output_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    started = time.perf_counter()
    try:
        async with session.post(f"{spec.base_url}/chat/completions", json=body, headers=headers) as response:
            if response.status != 200:
                result.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return result
            async for line in response.content:
                if not line.startswith(b"data: {"):
                    continue  # blank separators, keep-alive comments and [DONE]
                event = json.loads(line[6:])
                if _has_content(event):
                    now = time.perf_counter() - started
                    result.token_times.append(now)
                    if result.ttft_s is None:
                        result.ttft_s = now
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
    return result


async def run_level(
    spec: LoadSpec, on_result: Callable[[RequestResult], None] | None = None
) -> tuple[list[RequestResult], float]:
    """Send `spec.requests` requests with at most `spec.concurrency` in flight; return them and the wall time.

    `on_result` hears of each request as it finishes (on the event loop: keep it quick)."""
    pending = iter(range(spec.requests))
    results: list[RequestResult] = []
    connector = aiohttp.TCPConnector(limit=0, ssl=_tls_context(spec.cert_path) if spec.cert_path else True)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            for _ in pending:  # the shared iterator hands each request to exactly one worker
                result = await _one_request(session, spec)
                results.append(result)
                if on_result is not None:
                    on_result(result)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(spec.concurrency, spec.requests))))
        return results, time.perf_counter() - started
