"""Quality runs the service does for its clients, one at a time, as benchmarks are (app.service.jobs.bench_runs).

Each run is `modeldeck quality --progress-jsonl` in a child process of its own group: llama-perplexity runs for
minutes on every core, and a cancel stops the child and the tool it started. The child's JSON lines become the
run's state, published as `quality` events (chunk progress a few times a second, the rest at once).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import time
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.quality.card import QualityCard, compare_rows, saved_cards
from app.quality.measure import MAX_TOKENS, MIN_TOKENS
from app.self_command import modeldeck_command
from app.service.events import EventBus
from app.service.http.json_body import load_json
from engines.processes import spawn_engine, stop_process_tree

log = logging.getLogger("modeldeck.quality")

RunState = Literal["running", "completed", "failed", "cancelled"]
_FIELDS = {"model", "variants", "reference", "data", "tokens"}
PROGRESS_INTERVAL_S = 0.25
STOP_GRACE_S = 10.0  # the child stops its tool and removes its scratch files on SIGTERM: seconds on a busy machine
ERROR_LINES = 8
MAX_VARIANTS = 32
_CARD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class BadQualityRequest(Exception):
    """The request cannot be run as asked; the message says why, `param` names the field."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


class QualityConflict(Exception):
    """A run is already going (or none is, for a cancel)."""


class QualityCardNotFound(Exception):
    """No saved card has that id."""


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096 or "\x00" in value:
        raise BadQualityRequest(f"`{name}` must be a non-empty string.", name)
    return value


@dataclass(frozen=True)
class QualityRequest:
    """What to measure: a model's variants (all of them by default) against a reference, on a text."""

    model: str
    variants: tuple[str, ...] = ()
    reference: str | None = None
    data: str | None = None  # a text file on the service's machine
    tokens: int = 4096

    @classmethod
    def from_json(cls, raw: bytes, known_models: Collection[str]) -> QualityRequest:
        try:
            body = load_json(raw or b"null")
        except ValueError:
            raise BadQualityRequest("The body must be JSON.") from None
        if not isinstance(body, dict):
            raise BadQualityRequest('The body must be a JSON object such as {"model": "ID"}.')
        unknown = sorted(set(body) - _FIELDS)
        if unknown:
            raise BadQualityRequest(f"Unknown field {unknown[0]!r}.", unknown[0])
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise BadQualityRequest("`model` is required: a model id from GET /api/models.", "model")
        if model not in known_models:
            raise BadQualityRequest(f"Unknown model {model!r}.", "model", 404)
        variants = body.get("variants", [])
        if not isinstance(variants, list) or len(variants) > MAX_VARIANTS:
            raise BadQualityRequest(f"`variants` must be a list of at most {MAX_VARIANTS} model ids.", "variants")
        for variant in variants:
            if _text(variant, "variants") not in known_models:
                raise BadQualityRequest(f"Unknown model {variant!r} in `variants`.", "variants", 404)
        tokens = body.get("tokens", 4096)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not MIN_TOKENS <= tokens <= MAX_TOKENS:
            raise BadQualityRequest(f"`tokens` must be a whole number from {MIN_TOKENS} to {MAX_TOKENS}.", "tokens")
        reference = None if body.get("reference") is None else _text(body["reference"], "reference")
        data = None if body.get("data") is None else _text(body["data"], "data")
        if data is not None and not Path(data).is_file():
            raise BadQualityRequest(f"`data`: {data} is not a file on the service's machine.", "data")
        return cls(model, tuple(variants), reference, data, tokens)

    def argv(self) -> tuple[str, ...]:
        """The `modeldeck quality` command that runs this request."""
        args = [*modeldeck_command(), "quality", "--progress-jsonl", "--tokens", str(self.tokens)]
        for variant in self.variants:
            args += ["--variant", variant]
        if self.reference is not None:
            args += ["--reference", self.reference]
        if self.data is not None:
            args += ["--data", self.data]
        return (*args, "--", self.model)


@dataclass
class QualityRun:
    """One run and where it stands."""

    id: str
    request: QualityRequest
    state: RunState = "running"
    step: int = 0
    steps: int = 0
    variant: str | None = None
    chunk: int = 0
    chunks: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    card_id: str | None = None
    error: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None

    @property
    def fraction(self) -> float:
        if self.state == "completed":
            return 1.0
        if not self.steps:
            return 0.0
        within = self.chunk / self.chunks if self.chunks else 0.0
        return min(1.0, (self.step + within) / self.steps)

    def to_dict(self) -> dict[str, Any]:
        request = self.request
        return {
            "id": self.id, "state": self.state, "model": request.model, "variants": list(request.variants),
            "reference": request.reference, "data": request.data, "tokens": request.tokens, "step": self.step,
            "steps": self.steps, "variant": self.variant, "chunk": self.chunk, "chunks": self.chunks,
            "fraction": self.fraction, "results": self.results, "card_id": self.card_id, "error": self.error,
            "started": self.started, "finished": self.finished,
        }  # fmt: skip


class QualityRuns:
    """The quality runs of this service: at most one running; saved cards read from `cards_dir`."""

    def __init__(self, bus: EventBus, cards_dir: Path) -> None:
        self._bus = bus
        self._cards_dir = cards_dir
        self._ids = itertools.count(1)
        self._run: QualityRun | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_published = 0.0

    @property
    def current(self) -> QualityRun | None:
        return self._run

    async def start(self, request: QualityRequest) -> QualityRun:
        if self._run is not None and self._run.state == "running":
            raise QualityConflict(f"A quality run of {self._run.request.model} is already going; cancel it first.")
        run = QualityRun(f"quality-{next(self._ids)}", request)
        process, _ = await spawn_engine(request.argv(), {}, run.id, whole_environment=True)
        self._run, self._process = run, process
        self._task = asyncio.create_task(self._follow(run, process))
        self._publish(run)
        log.info("quality run %s of %s started (pid %s)", run.id, request.model, process.pid)
        return run

    async def cancel(self) -> QualityRun:
        run, process, task = self._run, self._process, self._task
        if run is None or run.state != "running" or process is None or task is None:
            raise QualityConflict("No quality run is going.")
        run.state = "cancelled"  # before the child ends, so its exit is not a failure
        # The child's group and every descendant: llama-perplexity runs in a session of its own.
        await stop_process_tree(process, STOP_GRACE_S)
        await task
        return run

    async def stop(self) -> None:
        if self._run is not None and self._run.state == "running":
            await self.cancel()

    async def _follow(self, run: QualityRun, process: asyncio.subprocess.Process) -> None:
        said: deque[str] = deque(maxlen=ERROR_LINES)
        assert process.stdout is not None
        try:
            async for raw in process.stdout:
                line = raw.decode("utf-8", errors="replace").strip()
                event = _event(line)
                if event is None:
                    if line:
                        said.append(line)
                elif run.state == "running":
                    self._apply(run, event)
        except ValueError:
            said.append("The quality process wrote a line too long to read; it was stopped.")
            await stop_process_tree(process, STOP_GRACE_S)
        code = await process.wait()
        if run.state == "running":
            if run.card_id is not None and code == 0:
                run.state = "completed"
            else:
                run.state = "failed"
                run.error = "\n".join(said) or f"The quality process exited with code {code}."
        run.finished = time.time()
        self._publish(run)
        log.info("quality run %s %s", run.id, run.state)

    def _apply(self, run: QualityRun, event: dict[str, Any]) -> None:
        kind = event.get("type")
        try:
            if kind == "step":
                run.step, run.steps, run.variant = int(event["index"]), int(event["of"]), str(event["variant"])
                run.chunk = run.chunks = 0
            elif kind == "chunk":
                run.chunk, run.chunks = int(event["done"]), int(event["of"])
                self._publish(run, throttled=True)
                return
            elif kind == "variant" and isinstance(event.get("result"), dict):
                run.results.append(event["result"])
            elif kind == "card":
                run.card_id = str(event["id"])
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("quality run %s: an event that could not be read (%s): %s", run.id, exc, event)
        self._publish(run)

    def _publish(self, run: QualityRun, throttled: bool = False) -> None:
        now = time.monotonic()
        if throttled and now - self._last_published < PROGRESS_INTERVAL_S:
            return
        self._last_published = now
        self._bus.publish({"type": "quality", "run": run.to_dict()})

    # Saved cards (blocking: file reads; call on a thread) ----------------------------------------------------

    def cards(self) -> list[dict[str, Any]]:
        """The saved cards, newest first, each as a short summary."""
        return [_summary(card) for card in saved_cards(self._cards_dir)]

    def card(self, card_id: str) -> QualityCard:
        if not _CARD_ID.fullmatch(card_id):
            raise BadQualityRequest(f"Not a card id: {card_id!r}.", "id")
        try:
            text = (self._cards_dir / f"{card_id}.json").read_text(encoding="utf-8")
        except FileNotFoundError:
            raise QualityCardNotFound(f"No quality card {card_id!r}.") from None
        try:
            return QualityCard.from_dict(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise BadQualityRequest(f"The card {card_id!r} cannot be read: {exc}", "id") from None

    def compare(self, first: str, second: str) -> list[tuple[str, str, str]]:
        return compare_rows(self.card(first), self.card(second))


def _event(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "type" in event else None


def _summary(card: QualityCard) -> dict[str, Any]:
    return {
        "id": card.id, "created": card.created, "model": card.model, "reference": card.reference,
        "text": card.text.get("description"), "text_kind": card.text.get("kind"), "tokens": card.text.get("tokens"),
        "variants": [
            {"id": r.id, "quantization": r.quantization, "ppl_increase_pct": r.ppl_increase_pct,
             "kld_mean": r.kld_mean, "top_token_agreement": r.top_token_agreement}
            for r in card.results
        ],
    }  # fmt: skip


__all__ = ["BadQualityRequest", "QualityCardNotFound", "QualityConflict", "QualityRequest", "QualityRun",
           "QualityRuns"]  # fmt: skip
