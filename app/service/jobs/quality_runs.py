"""Quality runs the service does for its clients, one at a time, as benchmarks are (app.service.jobs.child_jobs).

Each run is `modeldeck quality --progress-jsonl` in a child process of its own group: llama-perplexity runs for
minutes on every core, and a cancel stops the child and the tool it started. The child's JSON lines become the
run's state, published as `quality` events (chunk progress a few times a second, the rest at once).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.card_files import read_saved_card
from app.paths import AppPaths
from app.quality.card import QualityCard, compare_rows, quality_dir, saved_cards
from app.quality.measure import MAX_TOKENS, MIN_TOKENS
from app.quality.run import RunRequest, SetupError, check_request, not_local
from app.quality.text import TextError
from app.self_command import modeldeck_command
from app.service.events import EventBus
from app.service.jobs import child_jobs
from app.service.jobs.child_jobs import ChildJobs, ChildJobWords, RunState, request_body
from app.service.jobs.downloads import sentence

log = logging.getLogger("modeldeck.quality")

_FIELDS = {"model", "variants", "reference", "data", "tokens"}
STOP_GRACE_S = 10.0  # the child stops its tool and removes its scratch files on SIGTERM: seconds on a busy machine
MAX_VARIANTS = 32
_WORDS = ChildJobWords(
    "quality", "quality run", "quality", "A quality run of {model} is already going; cancel it first.",
    "No quality run is going.",
)  # fmt: skip


class BadQualityRequest(child_jobs.BadJobRequest):
    """The quality run cannot be done as asked; the message says why, `param` names the field."""


class QualityConflict(child_jobs.JobConflict):
    """A quality run is already going (or none is, for a cancel)."""


class QualityCardNotFound(child_jobs.JobCardNotFound):
    """No saved quality card has that id."""


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 4096 or "\x00" in value:
        raise BadQualityRequest(f"`{name}` must be a non-empty string.", name)
    return value


def _is_file(path: str, name: str) -> bool:
    """Whether `path` names a file; a 400 naming `name` when the system cannot look at it (a name over 255 bytes)."""
    try:
        return Path(path).is_file()
    except OSError as exc:
        raise BadQualityRequest(f"`{name}`: {path} cannot be read: {exc.strerror or exc}.", name) from exc


@dataclass(frozen=True)
class QualityRequest:
    """What to measure: a model's variants (all of them by default) against a reference, on a text."""

    model: str
    variants: tuple[str, ...] = ()
    reference: str | None = None
    data: str | None = None  # a text file on the service's machine
    tokens: int = 4096
    models_dirs: tuple[Path, ...] = ()  # the service's --models-dir folders, which the child reads too

    @classmethod
    def from_json(cls, raw: bytes, known_models: Collection[str]) -> QualityRequest:
        body, model = request_body(raw, _FIELDS, '{"model": "ID"}', BadQualityRequest)
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
        if reference is not None and reference not in known_models and not Path(reference).is_absolute():
            # A path relative to the service's folder means nothing to a client.
            raise BadQualityRequest("`reference` must be a model id or the absolute path of a GGUF file on the "
                                    "service's machine.", "reference")  # fmt: skip
        data = None if body.get("data") is None else _text(body["data"], "data")
        if data is not None and not _is_file(data, "data"):
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
        for folder in self.models_dirs:
            args += ["--models-dir", str(folder)]
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


class QualityRuns(ChildJobs[QualityRequest, QualityRun]):
    """The quality runs of this service: at most one running; saved cards read from the quality folder."""

    def __init__(
        self,
        bus: EventBus,
        paths: AppPaths,
        served_elsewhere: Callable[[str], str | None] = lambda _: None,
        models_dirs: tuple[Path, ...] = (),
    ) -> None:
        """`served_elsewhere(model_id)`: what serves that model outside the library ("remote NAME", an --upstream
        server), None for a model of this machine; `models_dirs`: the service's --models-dir folders."""
        super().__init__(bus, QualityRun, _WORDS, QualityConflict, log, STOP_GRACE_S)
        self._paths = paths
        self._models_dirs = models_dirs
        self._served_elsewhere = served_elsewhere
        self._cards_dir = quality_dir(paths)

    async def start(self, request: QualityRequest) -> QualityRun:
        """Start a run, once the checks its child makes first have passed here: a request that could only fail
        there (a reference that is no GGUF file, a variant of another model, no tools) is refused, not started."""
        self._refuse_served_elsewhere(request)
        request = dataclasses.replace(request, models_dirs=self._models_dirs)
        data = None if request.data is None else Path(request.data)
        planned = RunRequest(request.model, request.variants, request.reference, data, request.tokens,
                             self._models_dirs)  # fmt: skip
        try:
            await asyncio.to_thread(check_request, self._paths, planned)  # reads the library and GGUF headers
        except SetupError as exc:
            raise BadQualityRequest(f"{sentence(str(exc))}.", exc.param) from None
        except TextError as exc:
            raise BadQualityRequest(f"`data`: {exc}.", "data") from None
        return await super().start(request)

    def _refuse_served_elsewhere(self, request: QualityRequest) -> None:
        """The library, which the check reads, has no remote or --upstream model: it would call one unknown, or no
        variant."""
        named = [("model", request.model), *(("variants", variant) for variant in request.variants)]
        if request.reference is not None:
            named.append(("reference", request.reference))
        for param, model_id in named:
            server = self._served_elsewhere(model_id)
            if server is not None:
                raise BadQualityRequest(f"{not_local(model_id, server)}.", param)

    def _succeeded(self, run: QualityRun, code: int) -> bool:
        return run.card_id is not None and code == 0

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

    # Saved cards (blocking: file reads; call on a thread) ----------------------------------------------------

    def cards(self) -> list[dict[str, Any]]:
        """The saved cards, newest first, each as a short summary."""
        return [_summary(card) for card in saved_cards(self._cards_dir)]

    def card(self, card_id: str) -> QualityCard:
        return read_saved_card(
            self._cards_dir, card_id, QualityCard.from_dict, lambda message: BadQualityRequest(message, "id"),
            lambda: QualityCardNotFound(f"No quality card {card_id!r}."),
        )  # fmt: skip

    def compare(self, first: str, second: str) -> list[tuple[str, str, str]]:
        return compare_rows(self.card(first), self.card(second))


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
