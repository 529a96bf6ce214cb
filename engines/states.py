"""Engine states and the events that announce transitions between them."""

from __future__ import annotations

import time
from collections.abc import Mapping
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

# Every state an engine may move to from each state; anything else is a bug in whoever moved it.
# RESTARTING -> RESTARTING: the wait before a restart ends and the new attempt begins (a new message);
# READY -> FAILED: the engine exited once too often to be restarted.
TRANSITIONS: Mapping[EngineState, frozenset[EngineState]] = {
    EngineState.STOPPED: frozenset({EngineState.STARTING}),
    EngineState.STARTING: frozenset({EngineState.READY, EngineState.FAILED, EngineState.STOPPING}),
    EngineState.READY: frozenset({EngineState.RESTARTING, EngineState.FAILED, EngineState.STOPPING}),  # FAILED: gave up
    EngineState.RESTARTING: frozenset(
        {EngineState.RESTARTING, EngineState.READY, EngineState.FAILED, EngineState.STOPPING}
    ),
    EngineState.STOPPING: frozenset({EngineState.STOPPED}),
    EngineState.FAILED: frozenset({EngineState.STARTING}),
}


class IllegalTransition(RuntimeError):
    """A state change the table (TRANSITIONS) does not allow."""


def check_transition(previous: EngineState, state: EngineState) -> None:
    """Raise IllegalTransition unless an engine may go from `previous` to `state`."""
    if state not in TRANSITIONS[previous]:
        raise IllegalTransition(f"an engine cannot go from {previous} to {state}")


@dataclass(frozen=True)
class StateChange:
    """One state transition of one engine, as its supervisor reports it (the service publishes it to the GUI and
    CLI as an api_types.EngineEvent)."""

    model_id: str
    state: EngineState
    previous: EngineState
    message: str = ""
    pid: int | None = None
    port: int | None = None
    time: float = field(default_factory=time.time)
