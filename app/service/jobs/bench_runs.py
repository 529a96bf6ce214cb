"""Benchmarks the service runs for its clients, one at a time.

Each run is `modeldeck bench --progress-jsonl` in a child process (app.service.jobs.child_jobs): the load generator
then never competes with the gateway for this interpreter's lock, and a cancel is a signal to one process group.
The child's JSON lines become the run's state, published as `bench` events (progress a few times a second, every
level and the end at once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.bench.card import BenchCard, LevelResult, compare_rows, with_gains
from app.bench.levels import parse_concurrency
from app.bench.prompts import DEFAULT_PROMPT_MODE, DEFAULT_TURNS, MAX_TURNS, PROMPT_MODES, PromptMode
from app.bench.sweep import SweepOptions
from app.card_files import read_saved_card, saved_cards
from app.self_command import modeldeck_command
from app.service.events import EventBus
from app.service.jobs import child_jobs
from app.service.jobs.child_jobs import ChildJobs, ChildJobWords, RunState, request_body

log = logging.getLogger("modeldeck.bench")

MAX_PROMPT_TOKENS = 32_768
MAX_OUTPUT_TOKENS = 8_192
MAX_REQUESTS = 10_000
MAX_CONVERSATIONS = 4096
MAX_SEED = 2**32 - 1
_FIELDS = {"model", "concurrency", "prompt_tokens", "output_tokens", "requests", "prompt_mode", "prefix_tokens",
           "conversations", "turns", "seed"}  # fmt: skip
STOP_GRACE_S = 3.0
_WORDS = ChildJobWords("bench", "benchmark", "benchmark", "A benchmark of {model} is already running; cancel it first.",
                       "No benchmark is running.")  # fmt: skip


class BadBenchRequest(child_jobs.BadJobRequest):
    """The benchmark cannot be run as asked; the message says why, `param` names the field."""


class BenchConflict(child_jobs.JobConflict):
    """A benchmark is already running (or none is, for a cancel)."""


class CardNotFound(child_jobs.JobCardNotFound):
    """No saved benchmark card has that id."""


def _whole(value: Any, name: str, high: int, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadBenchRequest(f"`{name}` must be a whole number from {low} to {high}.", name)
    return value


def _mode(value: Any) -> PromptMode:
    for mode in PROMPT_MODES:
        if value == mode:
            return mode
    raise BadBenchRequest(f"`prompt_mode` must be one of {', '.join(PROMPT_MODES)}.", "prompt_mode")


@dataclass(frozen=True)
class BenchRequest:
    """What to measure: a model, its concurrency levels, how many prompt and output tokens, how prompts differ."""

    model: str
    concurrency: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int
    requests: int | None = None  # per level; None: the sweep's default, max(8, 2 x concurrency)
    prompt_mode: PromptMode = DEFAULT_PROMPT_MODE
    prefix_tokens: int = 0  # shared-prefix
    conversations: int | None = None  # multi-turn, per level; None: the sweep's default
    turns: int = DEFAULT_TURNS  # multi-turn
    seed: int = 0

    @classmethod
    def from_json(cls, raw: bytes, known_models: Collection[str]) -> BenchRequest:
        body, model = request_body(raw, _FIELDS, '{"model": "ID", "concurrency": [1, 4]}', BadBenchRequest)
        if model not in known_models:
            raise BadBenchRequest(
                f"Unknown model {model!r}. Known models: {', '.join(sorted(known_models)) or 'none'}.", "model", 404
            )
        levels = body.get("concurrency", [1, 4, 16, 64])
        if isinstance(levels, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in levels):
            levels = ",".join(str(n) for n in levels)
        if not isinstance(levels, str):
            raise BadBenchRequest("`concurrency` must be a list of whole numbers such as [1, 4, 16].", "concurrency")
        try:
            concurrency = parse_concurrency(levels)
        except ValueError as exc:
            raise BadBenchRequest(f"`concurrency`: {exc}.", "concurrency") from None
        request = cls(
            model, concurrency,
            _whole(body.get("prompt_tokens", 256), "prompt_tokens", MAX_PROMPT_TOKENS),
            _whole(body.get("output_tokens", 128), "output_tokens", MAX_OUTPUT_TOKENS),
            None if body.get("requests") is None else _whole(body["requests"], "requests", MAX_REQUESTS),
            _mode(body.get("prompt_mode", DEFAULT_PROMPT_MODE)),
            _whole(body.get("prefix_tokens", 0), "prefix_tokens", MAX_PROMPT_TOKENS, 0),
            None if body.get("conversations") is None
            else _whole(body["conversations"], "conversations", MAX_CONVERSATIONS),
            _whole(body.get("turns", DEFAULT_TURNS), "turns", MAX_TURNS, 2),
            _whole(body.get("seed", 0), "seed", MAX_SEED, 0),
        )  # fmt: skip
        request.options()  # what the sweep would refuse, refused now with its reason
        return request

    def options(self) -> SweepOptions:
        """The sweep's options; BadBenchRequest for a combination it cannot run."""
        try:
            return SweepOptions(self.concurrency, self.prompt_tokens, self.output_tokens, self.requests,
                                self.prompt_mode, self.seed, self.prefix_tokens, self.conversations,
                                self.turns)  # fmt: skip
        except ValueError as exc:
            said = str(exc)
            param = next((name for name in ("prefix", "turns", "requests", "conversations") if name in said), None)
            field_name = {"prefix": "prefix_tokens"}.get(param or "", param)
            raise BadBenchRequest(f"{said[:1].upper()}{said[1:]}.", field_name or "prompt_mode") from None

    def argv(self) -> tuple[str, ...]:
        """The `modeldeck bench` command that runs this request."""
        args = [*modeldeck_command(), "bench", "--progress-jsonl",
                "--concurrency", ",".join(map(str, self.concurrency)),
                "--prompt-tokens", str(self.prompt_tokens), "--output-tokens", str(self.output_tokens)]  # fmt: skip
        if self.requests is not None:
            args += ["--requests", str(self.requests)]
        args += ["--prompt-mode", self.prompt_mode, "--seed", str(self.seed)]
        if self.prompt_mode == "shared-prefix":
            args += ["--prefix-tokens", str(self.prefix_tokens)]
        if self.prompt_mode == "multi-turn":
            args += ["--turns", str(self.turns)]
            if self.conversations is not None:
                args += ["--conversations", str(self.conversations)]
        return (*args, "--", self.model)  # "--": a model id is never read as an option


@dataclass
class BenchRun:
    """One run and where it stands."""

    id: str
    request: BenchRequest
    state: RunState = "running"
    phase: str = "starting"  # starting, model, warmup, level, saving, then the final state
    requests_per_level: list[int] = field(default_factory=list)
    level_index: int | None = None
    level_done: int = 0
    levels: list[LevelResult] = field(default_factory=list)
    card_id: str | None = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None

    @property
    def fraction(self) -> float:
        """How much of the sweep's requests have finished, 0 to 1."""
        if self.state == "completed":
            return 1.0
        total = sum(self.requests_per_level)
        if not total or self.level_index is None:
            return 0.0
        return (sum(self.requests_per_level[: self.level_index]) + self.level_done) / total

    def to_dict(self) -> dict[str, Any]:
        request = self.request
        return {
            "id": self.id, "state": self.state, "phase": self.phase, "model": request.model,
            "concurrency": list(request.concurrency), "prompt_tokens": request.prompt_tokens,
            "output_tokens": request.output_tokens, "requests_per_level": self.requests_per_level,
            "prompt_mode": request.prompt_mode, "prefix_tokens": request.prefix_tokens,
            "conversations": request.conversations, "turns": request.turns, "seed": request.seed,
            "level_index": self.level_index, "level_done": self.level_done, "fraction": self.fraction,
            "levels": [level.__dict__ for level in with_gains(self.levels)], "card_id": self.card_id,
            "error": self.error, "started": self.started, "finished": self.finished,
        }  # fmt: skip


class BenchRuns(ChildJobs[BenchRequest, BenchRun]):
    """The benchmark runs of this service: at most one running; saved cards listed and read from `bench_dir`."""

    def __init__(self, bus: EventBus, bench_dir: Path) -> None:
        super().__init__(bus, BenchRun, _WORDS, BenchConflict, log, STOP_GRACE_S)
        self._bench_dir = bench_dir

    def _end(self, run: BenchRun, state: RunState) -> None:
        run.state, run.phase = state, state

    def _apply(self, run: BenchRun, event: dict[str, Any]) -> None:
        try:
            self._take(run, event)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            # A line of another version of the CLI: the run goes on, and its end is still reported.
            log.warning("benchmark %s: an event that could not be read (%s): %s", run.id, exc, event)

    def _take(self, run: BenchRun, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "phase":
            run.phase = str(event["phase"])
        elif kind == "started":
            run.requests_per_level = [int(n) for n in event["requests_per_level"]]
        elif kind == "progress":
            run.phase, run.level_index, run.level_done = "level", int(event["index"]), int(event["done"])
            if run.level_done < run.requests_per_level[run.level_index]:
                self._publish(run, throttled=True)
                return
        elif kind == "level":
            run.levels.append(LevelResult(**event["result"]))
            run.phase = "saving" if len(run.levels) == len(run.request.concurrency) else "level"
        elif kind == "card":
            run.card_id = str(event["id"])
        self._publish(run)

    # Saved cards (blocking: file reads; call on a thread) ----------------------------------------------------

    def cards(self) -> list[dict[str, Any]]:
        """The saved cards, newest first, each as a one-line summary."""
        return [_summary(card) for card in saved_cards(self._bench_dir, BenchCard.from_dict)]

    def card(self, card_id: str) -> BenchCard:
        return read_saved_card(
            self._bench_dir, card_id, BenchCard.from_dict, lambda message: BadBenchRequest(message, "id"),
            lambda: CardNotFound(f"No benchmark card {card_id!r}."),
        )  # fmt: skip

    def compare(self, first: str, second: str) -> list[tuple[str, str, str]]:
        return compare_rows(self.card(first), self.card(second))


def _summary(card: BenchCard) -> dict[str, Any]:
    results: Sequence[LevelResult] = card.results
    return {
        "id": card.id, "created": card.created, "model": card.model.get("id"),
        "quantization": card.model.get("quantization"), "engine": card.engine.get("name"),
        "concurrency": [level.concurrency for level in results],
        "best_output_tokens_per_s": max((level.output_tokens_per_s for level in results), default=None),
        "errors": sum(level.errors for level in results),
        "prompt_tokens": card.parameters.get("prompt_tokens"), "output_tokens": card.parameters.get("output_tokens"),
        "prompt_mode": card.prompt_mode,
        "best_prompt_tokens_per_s": max((level.prompt_tokens_per_s for level in results
                                         if level.prompt_tokens_per_s is not None), default=None),
    }  # fmt: skip


__all__ = ["BadBenchRequest", "BenchConflict", "BenchRequest", "BenchRun", "BenchRuns", "CardNotFound"]
