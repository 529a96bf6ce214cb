"""Where request measurements go: recent records in memory, every record in SQLite, live events, aggregates
and Prometheus text. SQLite is written from one thread of its own, so the event loop never waits on disk; that
thread wakes on its own clock, never at the loop's call, and writes what piled up in one statement
(app.service.metrics.sqlite_rows): it takes the interpreter lock from the loop a few times a second, not twice a row.

Prompt and completion text, when the user keeps it, goes to SQLite only: not to memory, events or the control
API, which carry measurements."""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from app.bad_files import fresh_if_unreadable
from app.service.events import EventBus
from app.service.metrics.metering import MeteredRequest, cache_reuse, percentile
from app.service.metrics.request_text import RequestText, completion_text, prompt_json
from app.service.metrics.sqlite_rows import connect_autocommit, insert_rows

_TEXT_COLUMNS = ["prompt_text", "completion_text"]
_COLUMNS = [*(field.name for field in fields(MeteredRequest)), *_TEXT_COLUMNS]
_SCHEMA = f"CREATE TABLE IF NOT EXISTS requests ({', '.join(_COLUMNS)})"
_Entry = tuple[MeteredRequest, RequestText | None]
_FLUSH_S = 0.5  # how often the writer takes what has piled up, and tries again what the disk refused
MAX_UNWRITTEN = 50_000  # records kept in memory while the disk refuses them (a few MB); then the oldest go

log = logging.getLogger("modeldeck.requests")


class RequestLog:
    """Keeps request records. `add` is cheap and never blocks; `close` flushes to disk."""

    def __init__(self, database: Path, bus: EventBus, keep: int = 10_000) -> None:
        self._recent: deque[MeteredRequest] = deque(maxlen=keep)
        self._bus = bus
        self._totals: dict[tuple[str, int], int] = {}
        self._tokens: dict[tuple[str, str], int] = {}
        # Never waited on: put() on a queue nobody blocks in wakes no thread.
        self._pending: queue.SimpleQueue[_Entry] = queue.SimpleQueue()
        self._closing = threading.Event()
        self._wake = threading.Event()  # flush now, not at the next tick
        self._rounds = threading.Condition()
        self._rounds_begun = self._rounds_done = 0
        self._listeners: list[Callable[[MeteredRequest], None]] = []
        self._stream_listeners: list[Callable[[str, int], None]] = []
        database.parent.mkdir(parents=True, exist_ok=True)
        self._writer = threading.Thread(target=self._write, args=(database,), name="request-log", daemon=True)
        self._writer.start()

    def add_listener(self, listener: Callable[[MeteredRequest], None]) -> None:
        """Call `listener` with every record as it is added (on the event loop; it must be quick)."""
        self._listeners.append(listener)

    def add_stream_listener(self, listener: Callable[[str, int], None]) -> None:
        """Call `listener(model, count)` with each forwarded chunk's count of content events, as a stream flows
        (on the event loop, for every chunk: it must be quicker still than a record listener)."""
        self._stream_listeners.append(listener)

    def stream_counter(self, model: str) -> Callable[[int], None] | None:
        """What a stream's meter calls with each chunk's count of content events; None when nobody listens."""
        listeners = list(self._stream_listeners)
        if len(listeners) == 1:
            return functools.partial(listeners[0], model)

        def count(found: int) -> None:
            for listener in listeners:
                listener(model, found)

        return count if listeners else None

    def add(self, record: MeteredRequest, text: RequestText | None = None) -> None:
        """Keep `record`; `text` (only when the user keeps request text) goes to SQLite with it."""
        self._recent.append(record)
        for listener in self._listeners:
            listener(record)
        key = (record.model, record.status)
        self._totals[key] = self._totals.get(key, 0) + 1
        for kind, count in (("prompt", record.prompt_tokens), ("completion", record.completion_tokens),
                            ("prompt_cached", record.prompt_cached_tokens)):  # fmt: skip
            if count:
                self._tokens[(record.model, kind)] = self._tokens.get((record.model, kind), 0) + count
        self._pending.put((record, text))
        if self._bus.has_subscribers:  # vars(), not asdict(): the record holds no containers to copy
            self._bus.publish({"type": "request", **vars(record)})

    def recent(self, limit: int) -> list[dict[str, Any]]:
        return [dict(vars(record)) for record in list(self._recent)[-limit:]]

    def aggregates(self, window_s: float) -> dict[str, dict[str, Any]]:
        """Per model over the last `window_s` seconds: counts, token rates and latency percentiles."""
        since = time.time() - window_s
        by_model: dict[str, list[MeteredRequest]] = {}
        for record in self._recent:
            if record.time >= since:
                by_model.setdefault(record.model, []).append(record)
        return {model: _summarize(records, window_s) for model, records in by_model.items()}

    def prometheus(self, queues: dict[str, tuple[int, int]]) -> str:
        """Prometheus text: totals since start, and the running/waiting count of each engine's queue."""
        lines = [
            "# HELP modeldeck_requests_total Requests through the gateway by model and HTTP status.",
            "# TYPE modeldeck_requests_total counter",
        ]
        lines += [
            f'modeldeck_requests_total{{model="{_label(m)}",status="{s}"}} {n}' for (m, s), n in self._totals.items()
        ]
        lines += ["# HELP modeldeck_tokens_total Prompt, completion and cached prompt tokens by model.",
                  "# TYPE modeldeck_tokens_total counter"]  # fmt: skip
        lines += [f'modeldeck_tokens_total{{model="{_label(m)}",kind="{k}"}} {n}' for (m, k), n in self._tokens.items()]
        for name, index, what in (("running", 0, "in an engine"), ("waiting", 1, "waiting in the gateway queue")):
            lines += [f"# HELP modeldeck_requests_{name} Requests {what}.", f"# TYPE modeldeck_requests_{name} gauge"]
            lines += [f'modeldeck_requests_{name}{{model="{_label(m)}"}} {q[index]}' for m, q in queues.items()]
        lines += ["# HELP modeldeck_ttft_seconds Time to first token over the last 5 minutes.",
                  "# TYPE modeldeck_ttft_seconds summary"]  # fmt: skip
        for model, summary in self.aggregates(300).items():
            for quantile, key in (("0.5", "ttft_p50_s"), ("0.95", "ttft_p95_s")):
                if summary[key] is not None:
                    lines.append(
                        f'modeldeck_ttft_seconds{{model="{_label(model)}",quantile="{quantile}"}} {summary[key]}'
                    )
        return "\n".join(lines) + "\n"

    def flush(self, timeout_s: float) -> bool:
        """Write what is pending now, waiting at most `timeout_s` (for a stop that cannot wait for `close`); whether
        the writer took it in that time."""
        with self._rounds:
            after = self._rounds_begun + 1  # a round begun after this call takes what was added before it
            self._wake.set()
            return self._rounds.wait_for(lambda: self._rounds_done >= after, timeout_s)

    def close(self) -> None:
        """Write what is pending and stop the writer."""
        self._closing.set()
        self._wake.set()
        self._writer.join(timeout=10)

    def _write(self, database: Path) -> None:
        unwritten: deque[tuple[Any, ...]] = deque(maxlen=MAX_UNWRITTEN)  # rows a failed write kept for the next
        connection = _open(database, retry=False)
        try:
            while True:
                self._wake.wait(_FLUSH_S)
                self._wake.clear()
                closing = self._closing.is_set()
                with self._rounds:
                    self._rounds_begun += 1
                connection = connection or _open(database, retry=True)
                self._flush(connection, unwritten)
                with self._rounds:
                    self._rounds_done += 1
                    self._rounds.notify_all()
                if closing:
                    break
            if unwritten:
                log.error("stopping with %d request records the disk did not take", len(unwritten))
        finally:
            if connection is not None:
                connection.close()

    def _flush(self, connection: sqlite3.Connection | None, unwritten: deque[tuple[Any, ...]]) -> None:
        """Write what piled up, with what an earlier write could not: all of it or, on a full disk, a file gone
        read-only or a log that would not open (no connection), none of it (kept for the next try)."""
        kept = len(unwritten)  # not empty: the disk refused the last write
        arrived = 0
        with contextlib.suppress(queue.Empty):
            while True:
                unwritten.append(_row(*self._pending.get_nowait()))  # past its length, the oldest go
                arrived += 1
        if not unwritten:
            return
        dropped = max(0, kept + arrived - MAX_UNWRITTEN)
        if dropped:
            log.error("the request log lost its %d oldest unwritten records", dropped)
        if connection is None:
            return
        try:
            # One transaction around a few multi-row INSERTs (sqlite_rows.py): all or nothing, in few steps.
            connection.execute("BEGIN")
            insert_rows(connection, "requests", _COLUMNS, list(unwritten))
            connection.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            if not kept:
                log.error("cannot write the request log (%s); requests are kept in memory and written when it "
                          "works again", exc)  # fmt: skip
            return
        if kept:
            log.warning("the request log is written again (%d records caught up)", len(unwritten))
        unwritten.clear()


def _open(database: Path, retry: bool) -> sqlite3.Connection | None:
    """A connection to the log, its table created or migrated; None while it cannot be had (another process holds the
    file locked), said on the first try only. A file that is not a database is set aside for a fresh one."""

    def kept(bad: Path, exc: sqlite3.DatabaseError) -> None:
        log.error("the request log %s is not a database (%s): kept it as %s and started a new one",
                  database, exc, bad.name)  # fmt: skip

    try:
        connection = fresh_if_unreadable(database, lambda: _connect(database), kept)
    except (sqlite3.Error, OSError) as exc:
        if not retry:
            log.warning("cannot open the request log %s (%s); requests are kept in memory and written once it "
                        "opens", database, exc)  # fmt: skip
        return None
    if retry:
        log.info("the request log %s opened", database)
    return connection


def _connect(database: Path) -> sqlite3.Connection:
    connection = connect_autocommit(database)
    try:
        _create_or_migrate(connection)
    except BaseException:
        connection.close()
        raise
    return connection


def _create_or_migrate(connection: sqlite3.Connection) -> None:
    """Create the table, or add the columns a log written by an older version lacks."""
    # Write-ahead log without a sync per commit: a power cut may lose the last records, never corrupt the file.
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("BEGIN")
    connection.execute(_SCHEMA)
    present = {row[1] for row in connection.execute("PRAGMA table_info(requests)")}
    for column in _COLUMNS:
        if column not in present:
            connection.execute(f"ALTER TABLE requests ADD COLUMN {column}")
    connection.execute("COMMIT")


def _row(record: MeteredRequest, text: RequestText | None) -> tuple[Any, ...]:
    if text is None:
        return (*vars(record).values(), None, None)
    return (*vars(record).values(), prompt_json(text), completion_text(text))


def _summarize(records: list[MeteredRequest], window_s: float) -> dict[str, Any]:
    ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
    itls = [r.itl_p50_s for r in records if r.itl_p50_s is not None]
    queued = [r.queued_s for r in records]
    completion = sum(r.completion_tokens or 0 for r in records)
    prompt = sum(r.prompt_tokens or 0 for r in records)
    cache = cache_reuse((r.prompt_cached_tokens, r.prompt_tokens) for r in records)
    return {
        "requests": len(records),
        "errors": sum(1 for r in records if r.status >= 400),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "completion_tokens_per_s": completion / window_s,
        "prompt_tokens_per_s": prompt / window_s,
        "ttft_p50_s": percentile(ttfts, 0.5),
        "ttft_p95_s": percentile(ttfts, 0.95),
        "itl_p50_s": percentile(itls, 0.5),
        "queue_p50_s": percentile(queued, 0.5),
        "prompt_cached_tokens": cache[0] if cache else None,
        "prompt_cache_reuse": cache[1] if cache else None,
    }


def _label(value: str) -> str:
    """A Prometheus label value: backslash, double quote and line feed escaped, as the text format requires.
    Model ids come from file names and remote servers' lists: a quote or a newline would forge series."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
