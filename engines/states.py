"""Engine states and the events that announce transitions between them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum


class EngineState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    FAILED = "failed"


ACTIVE_STATES = frozenset({EngineState.STARTING, EngineState.READY, EngineState.RESTARTING})


@dataclass(frozen=True)
class EngineEvent:
    """One state transition of one engine, as published to the GUI and CLI."""

    model_id: str
    state: EngineState
    previous: EngineState
    message: str = ""
    pid: int | None = None
    port: int | None = None
    time: float = field(default_factory=time.time)
