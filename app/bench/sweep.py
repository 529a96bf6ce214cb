"""`modeldeck bench`: a concurrency sweep through the gateway of the running service, saved as a card."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import __version__
from app.bench.card import BenchCard, LevelResult, card_id, hardware_fingerprint, with_gains
from app.bench.load import LoadSpec, RequestResult, run_level
from app.bench.progress import LevelDone, LevelProgress, SweepEvent, SweepPhase, SweepStarted
from app.client import ControlClient, ControlError
from app.planner.facts import gguf_quantization
from engines.gguf import GGUFError, read_gguf_info
from engines.registry import ENGINES

DEFAULT_CONCURRENCY = (1, 4, 16, 64)
MAX_CONCURRENCY = 4096


@dataclass(frozen=True)
class SweepOptions:
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    prompt_tokens: int = 256
    output_tokens: int = 128
    requests_per_level: int | None = None  # None: max(8, 2 x concurrency)

    def requests_for(self, concurrency: int) -> int:
        return self.requests_per_level or max(8, 2 * concurrency)


def _quantization(path: str | None) -> str | None:
    if not path or not path.endswith(".gguf") or not Path(path).is_file():
        return None
    try:
        return gguf_quantization(read_gguf_info(Path(path)))
    except GGUFError:
        return None


def _ready_model(client: ControlClient, model_id: str, report: Callable[[SweepEvent], None]) -> dict[str, Any]:
    described = {m["id"]: m for m in client.models()}
    if model_id not in described:
        raise ControlError(f"Unknown model {model_id!r}. Known models: {', '.join(described) or 'none'}.")
    model = described[model_id]
    if model["state"] != "ready":
        report(SweepPhase("model"))
        model = client.start_model(model_id, wait=True)
    if model["state"] != "ready":
        raise ControlError(f"{model_id} did not start: {model.get('message') or model['state']}")
    return model


def run_sweep(
    client: ControlClient,
    model_id: str,
    options: SweepOptions,
    on_event: Callable[[SweepEvent], None] | None = None,
) -> BenchCard:
    """Run every level in turn against the running service (blocking) and return the card, not yet saved.

    `on_event` hears each step: the model starting, the warm-up, each request finished, each level measured."""

    def report(event: SweepEvent) -> None:
        if on_event is not None:
            on_event(event)

    model = _ready_model(client, model_id, report)
    endpoint = client.endpoint()
    hardware = client.hardware()
    engine = ENGINES.get(model["engine"])
    engine_version = engine.detect().version if engine is not None else None

    def spec(concurrency: int, requests: int, output_tokens: int) -> LoadSpec:
        return LoadSpec(endpoint["url"].rstrip("/"), endpoint.get("api_key"), model_id, concurrency, requests,
                        options.prompt_tokens, output_tokens, (endpoint.get("tls") or {}).get("cert_path"))  # fmt: skip

    # One short request first, so the first level does not pay for a cold cache.
    report(SweepPhase("warmup"))
    asyncio.run(run_level(spec(1, 1, 4)))
    requests = [options.requests_for(c) for c in options.concurrency]
    report(SweepStarted(list(options.concurrency), requests))
    levels = []
    for index, concurrency in enumerate(options.concurrency):
        finished: list[RequestResult] = []

        def count(result: RequestResult, index: int = index, done: list[RequestResult] = finished) -> None:
            done.append(result)
            report(LevelProgress(index, options.concurrency[index], len(done), requests[index]))

        results, duration = asyncio.run(run_level(spec(concurrency, requests[index], options.output_tokens), count))
        level = LevelResult.summarize(concurrency, results, duration)
        levels.append(level)
        report(LevelDone(index, level))
    created = time.gmtime()
    return BenchCard(
        id=card_id(time.strftime("%Y%m%d-%H%M%S", created), model_id),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", created),
        modeldeck_version=__version__,
        model={
            "id": model_id,
            "name": model.get("name"),
            "path": model.get("path"),
            "size_bytes": model.get("size_bytes"),
            "quantization": _quantization(model.get("path")),
        },
        engine={"name": model["engine"], "version": engine_version, "plan": model.get("plan")},
        hardware=hardware_fingerprint(hardware),
        parameters={
            "concurrency": list(options.concurrency),
            "prompt_tokens": options.prompt_tokens,
            "output_tokens": options.output_tokens,
            "requests_per_level": requests,
            "endpoint": "/v1/chat/completions",
            "temperature": 0,
        },
        results=with_gains(levels),
    )


def parse_concurrency(text: str) -> tuple[int, ...]:
    """ "1,4,16" -> (1, 4, 16); each level a whole number from 1 to 4096."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or any(not part.isdigit() or not 1 <= int(part) <= MAX_CONCURRENCY for part in parts):
        raise ValueError(f"concurrency levels must be whole numbers from 1 to {MAX_CONCURRENCY}, got {text!r}")
    return tuple(int(part) for part in parts)


def level_line(event: SweepEvent) -> str | None:
    """What the CLI prints of a sweep event as it happens: a line per level measured."""
    if not isinstance(event, LevelDone):
        return None
    level = event.result
    return (f"concurrency {level.concurrency:>4}: {level.output_tokens_per_s:8.1f} output tok/s, "
            f"{level.errors} errors of {level.requests}")  # fmt: skip


__all__ = ["DEFAULT_CONCURRENCY", "MAX_CONCURRENCY", "SweepOptions", "level_line", "parse_concurrency", "run_sweep"]
