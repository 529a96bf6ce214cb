"""Calibration: predicted against measured memory of real launches, kept in SQLite, and the correction learned from it.

The memory model's least certain part is an engine's runtime (interpreter, libraries, allocator slack), which
differs by machine and version. It is learned where nothing else is uncertain: once the engine is ready, when
weights, KV cache and runtime are resident and no request has touched the compute buffers yet. The correction for
an engine and architecture is the median of measured minus predicted at that point over its recent launches,
added to the runtime part of later predictions. After the first request the prediction is the peak (a prompt that
fills the context), an upper bound the measurement is checked against.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from app.bad_files import fresh_if_unreadable
from app.planner.memory import MemoryEstimate

log = logging.getLogger("modeldeck.calibration")
_T = TypeVar("_T")

RECENT = 8  # launches a correction is learned from
PHASES = ("ready", "first_request")


@dataclass(frozen=True)
class Measurement:
    """One launch's prediction and what the engine really used at one phase."""

    engine: str
    architecture: str
    model_id: str
    context: int
    gpu_layers: int
    phase: str  # ready (predicted: resident at load), first_request (predicted: the peak)
    predicted_ram: int
    predicted_vram: int
    measured_ram: int
    measured_vram: int | None
    at: float = 0.0

    @property
    def error(self) -> float:
        """Relative error of the prediction against the measurement (positive: predicted too much)."""
        predicted = self.predicted_ram + self.predicted_vram
        measured = self.measured_ram + (self.measured_vram or 0)
        return (predicted - measured) / measured if measured else 0.0


@dataclass(frozen=True)
class Correction:
    """Bytes added to the runtime part of a prediction (RAM and VRAM), learned from measurements."""

    ram: int = 0
    vram: int = 0
    samples: int = 0

    @classmethod
    def none(cls) -> Correction:
        return cls()

    def apply(self, estimate: MemoryEstimate) -> MemoryEstimate:
        if not self.samples:
            return estimate
        parts = tuple(
            dataclasses.replace(
                part, ram=max(0, part.ram + self.ram), vram=max(0, part.vram + (self.vram if part.vram else 0))
            )
            if part.name == "runtime"
            else part
            for part in estimate.parts
        )
        return dataclasses.replace(estimate, parts=parts)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    engine TEXT NOT NULL,
    architecture TEXT NOT NULL,
    model_id TEXT NOT NULL,
    context INTEGER NOT NULL,
    gpu_layers INTEGER NOT NULL,
    phase TEXT NOT NULL,
    predicted_ram INTEGER NOT NULL,
    predicted_vram INTEGER NOT NULL,
    measured_ram INTEGER NOT NULL,
    measured_vram INTEGER
)
"""
_COLUMNS = tuple(field.name for field in dataclasses.fields(Measurement))


class CalibrationStore:
    """Measurements in one SQLite file. Short transactions; safe to open from the service and the CLI. A file that is
    not a database is set aside and a fresh one made. While another process holds the file locked past
    `busy_timeout_s`, a correction is `none` and a measurement goes unkept, each with a warning."""

    def __init__(self, path: Path, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s

    def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """`work` in one transaction; a file that is not a database is set aside and `work` runs in a fresh one."""

        def kept(bad: Path, exc: sqlite3.DatabaseError) -> None:
            log.warning("the calibration store %s is not a database (%s): kept it as %s and started a new one",
                        self.path, exc, bad.name)  # fmt: skip

        return fresh_if_unreadable(self.path, lambda: self._transaction(work), kept)

    def _transaction(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=self.busy_timeout_s)
        try:
            with connection:
                connection.execute(_SCHEMA)
                return work(connection)
        finally:
            connection.close()

    def record(self, measurement: Measurement) -> Measurement:
        stamped = dataclasses.replace(measurement, at=measurement.at or time.time())
        insert = f"INSERT INTO measurements ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        try:
            self._run(lambda connection: connection.execute(insert, dataclasses.astuple(stamped)))
        except (sqlite3.Error, OSError) as exc:
            log.warning("cannot use the calibration store %s (%s): the %s measurement of %s is not kept",
                        self.path, exc, stamped.phase, stamped.model_id)  # fmt: skip
        return stamped

    def recent(self, engine: str, architecture: str | None = None, limit: int = 50) -> list[Measurement]:
        query = f"SELECT {', '.join(_COLUMNS)} FROM measurements WHERE engine = ?"
        args: list[object] = [engine]
        if architecture is not None:
            query += " AND architecture = ?"
            args.append(architecture)
        query += " ORDER BY id DESC LIMIT ?"
        rows = self._run(lambda connection: connection.execute(query, [*args, limit]).fetchall())
        return [Measurement(*row) for row in rows]

    def correction(self, engine: str, architecture: str | None) -> Correction:
        """The runtime correction from the most recent at-load measurements of this engine and architecture."""
        if architecture is None:
            return Correction.none()
        try:
            recent = self.recent(engine, architecture)
        except (sqlite3.Error, OSError) as exc:  # locked by another process, or a folder we may not write
            log.warning("cannot use the calibration store %s (%s): %s on %s is planned without a correction",
                        self.path, exc, architecture, engine)  # fmt: skip
            return Correction.none()
        done = [m for m in recent if m.phase == "ready"][:RECENT]
        if not done:
            return Correction.none()
        ram = statistics.median(m.measured_ram - m.predicted_ram for m in done)
        vram_samples = [m.measured_vram - m.predicted_vram for m in done if m.measured_vram is not None]
        vram = statistics.median(vram_samples) if vram_samples else 0
        return Correction(int(ram), int(vram), len(done))
