"""What a sweep reports while it runs, as frozen events; `--progress-jsonl` prints each as one JSON line.

The service runs `modeldeck bench --progress-jsonl` as a child process and reads these lines, so the GUI sees the
sweep advance while the load itself never shares the service's interpreter.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from app.bench.card import LevelResult


@dataclass(frozen=True)
class SweepPhase:
    """A step before the levels: `model` (starting the model when it is not ready) or `warmup`."""

    phase: str


@dataclass(frozen=True)
class SweepStarted:
    """The levels are about to run; `requests_per_level` matches `concurrency` one to one."""

    concurrency: list[int]
    requests_per_level: list[int]


@dataclass(frozen=True)
class LevelProgress:
    """`done` of `requests` requests of the level at `index` (in sweep order) have finished."""

    index: int
    concurrency: int
    done: int
    requests: int


@dataclass(frozen=True)
class LevelDone:
    """The level at `index` is measured; its gain is filled in once the whole sweep is known."""

    index: int
    result: LevelResult


@dataclass(frozen=True)
class CardSaved:
    """The sweep is over and its card is on disk."""

    id: str
    json_path: str
    markdown_path: str


SweepEvent = SweepPhase | SweepStarted | LevelProgress | LevelDone | CardSaved

_TYPES: dict[type[Any], str] = {
    SweepPhase: "phase",
    SweepStarted: "started",
    LevelProgress: "progress",
    LevelDone: "level",
    CardSaved: "card",
}


def event_json(event: SweepEvent) -> str:
    """One line of `--progress-jsonl`: {"type": ..., fields...}."""
    return json.dumps({"type": _TYPES[type(event)], **asdict(event)})
