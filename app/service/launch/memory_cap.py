"""The memory cap on loaded engines: whether one more fits under it, and which idle engine makes room first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadedEngine:
    """An engine that holds memory now, as the cap sees it."""

    model_id: str
    bytes: int  # its plan's predicted peak, with its embedding process if one runs
    idle: bool  # no request running or waiting
    last_used: float  # time.monotonic() of its last request or start


@dataclass(frozen=True)
class RoomVerdict:
    """What a start of `need` bytes takes under the cap: nothing (both None), stopping `stop` first (then ask
    again), or it cannot fit (`problem` says why)."""

    stop: str | None = None
    problem: str | None = None


def room_for(need: int, cap: int | None, loaded: Sequence[LoadedEngine], what: str) -> RoomVerdict:
    """Whether `need` bytes (for `what`) fit under `cap` next to `loaded`; if not, the least recently used idle
    engine to stop before asking again. No cap (None): everything fits."""
    if cap is None:
        return RoomVerdict()
    if need > cap:
        return RoomVerdict(problem=f"{what} needs about {need >> 20} MiB, more than the cap of {cap >> 20} MiB")
    if sum(engine.bytes for engine in loaded) + need <= cap:
        return RoomVerdict()
    idle = [engine for engine in loaded if engine.idle]
    if not idle:
        return RoomVerdict(problem=f"{what} does not fit under the memory cap next to engines in use")
    return RoomVerdict(stop=min(idle, key=lambda engine: engine.last_used).model_id)
