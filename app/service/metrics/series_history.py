"""Metrics history in SQLite under the data directory, so charts survive a service restart.

Two tiers: `s` rows (one a second) are kept for an hour, `m` rows (minute averages) for a week. Compaction
deletes what a tier no longer keeps. All disk work runs on one thread of its own, so the event loop never
waits on SQLite; that thread wakes on its own clock, never at the loop's call, and writes what piled up in one
statement (app.service.metrics.sqlite_rows), taking the interpreter lock from the loop as rarely as it can.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from app.bounded_json import load_json
from app.service.metrics.series import MINUTE_KEEP, MINUTE_S, RAW_KEEP_S, Labels, Point, SeriesStore
from app.service.metrics.sqlite_rows import connect_autocommit, insert_rows

log = logging.getLogger("modeldeck.metrics")

KEEP_MINUTES_S = 7 * 24 * 3600
COMPACT_EVERY_S = 600.0
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS samples (tier TEXT NOT NULL, name TEXT NOT NULL, labels TEXT NOT NULL, "
    "t REAL NOT NULL, v REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS samples_tier_t ON samples (tier, t)",
)
_COLUMNS = ("tier", "name", "labels", "t", "v")
FLUSH_S = 2.0  # how often the writer takes the ticks that piled up


@dataclass(frozen=True)
class _Batch:
    tier: str
    rows: list[tuple[str, str, float, float]]  # name, labels as JSON, t, value


def _labels_text(labels: Labels) -> str:
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


def _labels_of(text: str) -> Labels | None:
    """The labels `_labels_text` wrote; None for anything else a damaged or hand-edited file holds."""
    try:
        labels = load_json(text)
    except ValueError:  # not JSON, nested too deeply, or a blob that is not UTF-8
        return None
    if not isinstance(labels, dict) or not all(isinstance(value, str) for value in labels.values()):
        return None
    return tuple(sorted(labels.items()))


class SeriesHistory:
    """Writes ticks and closed minutes to SQLite; `load_into` reads the last day back at start."""

    def __init__(self, database: Path, compact_every_s: float = COMPACT_EVERY_S) -> None:
        self._database = database
        self._compact_every_s = compact_every_s
        # Never waited on: put() on a queue nobody blocks in wakes no thread.
        self._pending: queue.SimpleQueue[_Batch] = queue.SimpleQueue()
        self._closing = threading.Event()
        self._writer: threading.Thread | None = None
        self._label_text: dict[Labels, str] = {}

    def load_into(self, store: SeriesStore, now: float) -> int:
        """Restore the last hour of seconds and the last day of minutes; return the series restored. Blocking."""
        self._database.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self._database)
        try:
            for statement in _SCHEMA:
                connection.execute(statement)
            found: dict[tuple[str, str], tuple[list[tuple[float, float]], list[tuple[float, float]]]] = {}
            for tier, since in (("s", now - RAW_KEEP_S), ("m", now - MINUTE_KEEP * MINUTE_S)):
                rows = connection.execute(
                    "SELECT name, labels, t, v FROM samples WHERE tier = ? AND t >= ? ORDER BY t", (tier, since)
                )
                for name, labels_json, t, v in rows:
                    found.setdefault((name, labels_json), ([], []))[0 if tier == "s" else 1].append((t, v))
        finally:
            connection.close()
        unreadable = 0
        for (name, labels_json), (raw, minutes) in found.items():
            labels = _labels_of(labels_json)
            if labels is None:
                unreadable += 1
                continue
            store.restore(name, labels, raw, minutes)
        if unreadable:
            log.warning("metrics history: %d series with unreadable labels left out", unreadable)
        return len(found) - unreadable

    def start(self) -> None:
        self._writer = threading.Thread(target=self._write, name="metrics-history", daemon=True)
        self._writer.start()

    def add(self, t: float, points: list[Point], minutes: list[tuple[Point, float]]) -> None:
        """Queue one tick and the minutes it closed. Cheap; never blocks."""
        self._pending.put(_Batch("s", [(p.name, self._text(p.labels), t, p.value) for p in points]))
        if minutes:
            self._pending.put(_Batch("m", [(p.name, self._text(p.labels), start, p.value) for p, start in minutes]))

    def close(self) -> None:
        if self._writer is not None:
            self._closing.set()
            self._writer.join(timeout=10)

    def _text(self, labels: Labels) -> str:
        text = self._label_text.get(labels)
        if text is None:
            text = self._label_text[labels] = _labels_text(labels)
        return text

    def _write(self) -> None:
        connection = connect_autocommit(self._database)
        last_compaction = 0.0
        try:
            for statement in _SCHEMA:
                connection.execute(statement)
            while not self._closing.wait(FLUSH_S):
                self._flush(connection)
                if time.monotonic() - last_compaction >= self._compact_every_s:
                    compact(connection, time.time())
                    last_compaction = time.monotonic()
            self._flush(connection)
        except sqlite3.Error as exc:
            log.error("metrics history stopped: %s", exc)
        finally:
            connection.close()

    def _flush(self, connection: sqlite3.Connection) -> None:
        rows = []
        with contextlib.suppress(queue.Empty):
            while True:
                batch = self._pending.get_nowait()
                rows += [(batch.tier, *row) for row in batch.rows]
        if rows:
            insert_rows(connection, "samples", _COLUMNS, rows)


def compact(connection: sqlite3.Connection, now: float) -> tuple[int, int]:
    """Delete seconds older than an hour and minutes older than a week; return the rows deleted of each."""
    with connection:
        seconds = connection.execute("DELETE FROM samples WHERE tier = 's' AND t < ?", (now - RAW_KEEP_S,)).rowcount
        minutes = connection.execute("DELETE FROM samples WHERE tier = 'm' AND t < ?", (now - KEEP_MINUTES_S,)).rowcount
    return seconds, minutes
