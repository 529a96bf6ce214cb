"""`modeldeck bench`: a concurrency sweep through the gateway of the running service, saved as a card."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import __version__
from app.api_types import ModelRecord, ModelState
from app.bench.card import BenchCard, LevelResult, card_id, with_gains
from app.bench.levels import MAX_CONCURRENCY
from app.bench.load import (
    ConversationSpec,
    LoadError,
    LoadSpec,
    RequestResult,
    count_prompt_tokens,
    run_conversations,
    run_level,
)
from app.bench.progress import LevelDone, LevelProgress, SweepEvent, SweepPhase, SweepStarted
from app.bench.prompts import (
    DEFAULT_PROMPT_MODE,
    DEFAULT_TURNS,
    FOLLOW_UP_WORDS,
    MAX_TURNS,
    MIN_OWN_WORDS,
    PROMPT_MODES,
    PromptMode,
    PromptSet,
    calibration_prompt,
    digest,
)
from app.bench.run_load import run_load
from app.client import ControlClient, ControlError
from app.hardware.fingerprint import hardware_fingerprint
from engines.gguf import GGUFError, read_gguf_info
from engines.registry import ENGINES

DEFAULT_CONCURRENCY = (1, 4, 16, 64)
MIN_CONVERSATIONS = 3  # fewer would not show one cache serving several users in turn
CALIBRATION_WORDS = 32


@dataclass(frozen=True)
class SweepOptions:
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    prompt_tokens: int = 256  # the whole prompt as the engine counts it, chat template included
    output_tokens: int = 128
    requests_per_level: int | None = None  # None: max(8, 2 x concurrency); multi-turn: conversations x turns
    prompt_mode: PromptMode = DEFAULT_PROMPT_MODE
    seed: int = 0
    prefix_tokens: int = 0  # shared-prefix: tokens every prompt starts with
    conversations: int | None = None  # multi-turn, per level; None: max(3, concurrency)
    turns: int = DEFAULT_TURNS  # multi-turn

    def __post_init__(self) -> None:
        counts = {"prompt tokens": self.prompt_tokens, "output tokens": self.output_tokens,
                  "requests per level": self.requests_per_level}  # fmt: skip
        for name, count in counts.items():
            if count is not None and count < 1:
                raise ValueError(f"{name} must be at least 1, got {count}")
        if self.prompt_mode not in PROMPT_MODES:
            raise ValueError(f"the prompt mode must be one of {', '.join(PROMPT_MODES)}, not {self.prompt_mode!r}")
        if self.prompt_mode == "shared-prefix" and not 1 <= self.prefix_tokens < self.prompt_tokens:
            raise ValueError(f"shared-prefix needs a prefix of 1 to {self.prompt_tokens - 1} tokens (fewer than the "
                             f"prompt's {self.prompt_tokens}), got {self.prefix_tokens}")  # fmt: skip
        if self.prompt_mode == "multi-turn" and not 2 <= self.turns <= MAX_TURNS:
            raise ValueError(f"multi-turn needs 2 to {MAX_TURNS} turns, got {self.turns}")
        if self.prompt_mode == "multi-turn" and self.requests_per_level is not None:
            raise ValueError("a multi-turn level sends conversations x turns requests: set those, not the requests")
        if self.conversations is not None and not 1 <= self.conversations <= MAX_CONCURRENCY:
            raise ValueError(f"conversations must be from 1 to {MAX_CONCURRENCY}, got {self.conversations}")

    def conversations_for(self, concurrency: int) -> int:
        return self.conversations or max(MIN_CONVERSATIONS, concurrency)

    def requests_for(self, concurrency: int) -> int:
        if self.prompt_mode == "multi-turn":
            return self.conversations_for(concurrency) * self.turns
        return self.requests_per_level if self.requests_per_level is not None else max(8, 2 * concurrency)


class SweepError(Exception):
    """The sweep cannot run as asked; the message says why."""


def _quantization(path: str | None) -> str | None:
    if not path or not path.endswith(".gguf") or not Path(path).is_file():
        return None
    try:
        return read_gguf_info(Path(path)).quantization
    except GGUFError:
        return None


def _ready_model(client: ControlClient, model_id: str, report: Callable[[SweepEvent], None]) -> ModelRecord:
    described = {m["id"]: m for m in client.models()}
    if model_id not in described:
        raise ControlError(f"Unknown model {model_id!r}. Known models: {', '.join(described) or 'none'}.")
    model = described[model_id]
    if model["state"] != ModelState.READY:
        report(SweepPhase("model"))
        model = client.start_model(model_id, wait=True)
    if model["state"] != ModelState.READY:
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

    cert_path = tls["cert_path"] if (tls := endpoint.get("tls")) else None  # an HTTPS endpoint's certificate
    target = _Target(endpoint["url"].rstrip("/"), endpoint.get("api_key"), model_id, cert_path)

    report(SweepPhase("warmup"))
    overhead, prompts = _calibrate(target, options)
    # One request before the levels, so the first level does not pay for loading: in `identical` mode the prompt
    # every request sends, in `shared-prefix` the shared prefix, else a prompt no level sends.
    warmup = functools.partial(prompts.prompt, "warmup")
    run_load(run_level(LoadSpec(target.base_url, target.api_key, model_id, 1, 1, 4, warmup, target.cert_path)))
    requests = [options.requests_for(c) for c in options.concurrency]
    report(SweepStarted(list(options.concurrency), requests))
    levels, sent = _run_levels(target, options, prompts, requests, report)
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
        engine={
            "name": model["engine"],
            "version": engine_version,
            "plan": model.get("plan"),
            "launch": model.get("launch"),
        },
        hardware=hardware_fingerprint(hardware),
        parameters=_parameters(options, requests, prompts, overhead, sent),
        results=with_gains(levels),
    )


@dataclass(frozen=True)
class _Target:
    base_url: str
    api_key: str | None
    model: str
    cert_path: str | None


def _run_levels(
    target: _Target,
    options: SweepOptions,
    prompts: PromptSet,
    requests: list[int],
    report: Callable[[SweepEvent], None],
) -> tuple[list[LevelResult], list[str]]:
    """Each level in turn; its results, and the user messages the levels sent (seeded, so known beforehand)."""
    levels: list[LevelResult] = []
    sent: list[str] = []
    for index, concurrency in enumerate(options.concurrency):
        finished: list[RequestResult] = []

        def count(result: RequestResult, index: int = index, done: list[RequestResult] = finished) -> None:
            done.append(result)
            report(LevelProgress(index, options.concurrency[index], len(done), requests[index]))

        stream = f"level{index}"
        if options.prompt_mode == "multi-turn":
            talk = ConversationSpec(
                target.base_url, target.api_key, target.model, concurrency, options.conversations_for(concurrency),
                options.turns, options.output_tokens, functools.partial(prompts.prompt, stream),
                functools.partial(prompts.follow_up, stream), target.cert_path,
            )  # fmt: skip
            sent += [talk.first(c) for c in range(talk.conversations)]
            sent += [talk.follow_up(c, t) for c in range(talk.conversations) for t in range(2, talk.turns + 1)]
            results, duration = run_load(run_conversations(talk, count))
        else:
            prompt = functools.partial(prompts.prompt, stream)
            load = LoadSpec(target.base_url, target.api_key, target.model, concurrency, requests[index],
                            options.output_tokens, prompt, target.cert_path)  # fmt: skip
            sent += [load.prompt(i) for i in range(load.requests)]
            results, duration = run_load(run_level(load, count))
        level = LevelResult.summarize(concurrency, results, duration)
        levels.append(level)
        report(LevelDone(index, level))
    return levels, sent


def _parameters(
    options: SweepOptions, requests: list[int], prompts: PromptSet, overhead: int | None, sent: list[str]
) -> dict[str, Any]:
    """The card's record of what was asked and sent."""
    multi_turn = options.prompt_mode == "multi-turn"
    return {
        "concurrency": list(options.concurrency),
        "prompt_tokens": options.prompt_tokens,
        "output_tokens": options.output_tokens,
        "requests_per_level": requests,
        "endpoint": "/v1/chat/completions",
        "temperature": 0,
        "prompt_mode": options.prompt_mode,
        "seed": options.seed,
        "prefix_tokens": options.prefix_tokens if options.prompt_mode == "shared-prefix" else None,
        "conversations": [options.conversations_for(c) for c in options.concurrency] if multi_turn else None,
        "turns": options.turns if multi_turn else None,
        "follow_up_words": FOLLOW_UP_WORDS if multi_turn else None,
        "prompt_words": prompts.words,
        "prompt_overhead_tokens": overhead,  # what the chat template and instruction add; None: not reported
        "prompt_digest": digest(sent),
    }


def _calibrate(target: _Target, options: SweepOptions) -> tuple[int | None, PromptSet]:
    """What the chat template and the instruction add to a prompt, as the engine counts it (None when it does not
    say), and the prompts whose whole length is then `options.prompt_tokens`."""
    try:
        counted = run_load(
            count_prompt_tokens(
                target.base_url,
                target.api_key,
                target.model,
                calibration_prompt(CALIBRATION_WORDS, options.seed),
                target.cert_path,
            )
        )
    except LoadError as exc:
        raise SweepError(f"could not count the prompt's tokens: {exc}") from None
    overhead = None if counted is None else counted - CALIBRATION_WORDS
    # The prefix counts from the first word of the user's message: the template's lead is shared by all anyway.
    prefix = options.prefix_tokens if options.prompt_mode == "shared-prefix" else 0
    least = (overhead or 0) + prefix + MIN_OWN_WORDS
    if options.prompt_tokens < least:
        fixed = f"the chat template and the instruction take {overhead}, " if overhead else ""
        shared = f"the shared prefix {prefix}, " if prefix else ""
        raise SweepError(f"{options.prompt_tokens} prompt tokens are too few for this model: {fixed}{shared}and "
                         f"each request needs {MIN_OWN_WORDS} words of its own; ask for at least {least}")  # fmt: skip
    return overhead, PromptSet(options.prompt_mode, options.seed, options.prompt_tokens - (overhead or 0), prefix)


def level_line(event: SweepEvent) -> str | None:
    """What the CLI prints of a sweep event as it happens: a line per level measured."""
    if not isinstance(event, LevelDone):
        return None
    level = event.result
    first = f" (the first: {level.first_error})" if level.first_error else ""
    return (f"concurrency {level.concurrency:>4}: {level.output_tokens_per_s:8.1f} output tok/s, "
            f"{level.errors} errors of {level.requests}{first}")  # fmt: skip


__all__ = ["DEFAULT_CONCURRENCY", "SweepError", "SweepOptions", "level_line", "run_sweep"]
