"""Responses kept for `GET /v1/responses/{id}` and `previous_response_id`, in the service's SQLite.

Each row holds the response as the client read it and the conversation that led to it, as chat messages (the
earlier turns, this turn's input and its output): a continuation reads one row, never a chain of them. The
file is the user's alone (0600, as the request log: server.py makes it with make_private_file before it opens),
and rows older than RETENTION_S are deleted when the store opens and then once an hour as responses are added.

SQLite is used from one thread of the store's own, so the event loop never waits on the disk."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from app.bad_files import fresh_if_unreadable
from app.service.metrics.sqlite_rows import connect_autocommit

RETENTION_S = 30 * 24 * 3600.0  # OpenAI keeps stored responses 30 days; the request log keeps its rows no longer
_PRUNE_EVERY_S = 3600.0
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, created_at REAL, response TEXT, messages TEXT, "
    "input_items TEXT)"
)
T = TypeVar("T")

log = logging.getLogger("modeldeck.responses")


@dataclass(frozen=True)
class StoredResponse:
    """A response object as answered, the chat messages of its whole conversation (its output last), and the
    request's own input items (GET /v1/responses/{id}/input_items)."""

    id: str
    created_at: float
    response: dict[str, Any]
    messages: list[dict[str, Any]]
    input_items: list[dict[str, Any]] = field(default_factory=list)


class ResponseStore:
    """Stored responses by id. Every method but `close` is awaited and runs on the store's thread."""

    def __init__(self, database: Path, retention_s: float = RETENTION_S) -> None:
        self._database = database
        self._retention_s = retention_s
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-store")
        self._connection: sqlite3.Connection | None = None
        self._pruned_at = 0.0

    async def put(self, stored: StoredResponse) -> None:
        await self._run(functools.partial(self._put, stored))

    async def get(self, response_id: str) -> StoredResponse | None:
        return await self._run(functools.partial(self._get, response_id))

    async def delete(self, response_id: str) -> bool:
        """Whether there was such a response to delete."""
        return await self._run(functools.partial(self._delete, response_id))

    def close(self) -> None:
        self._thread.submit(self._close).result(timeout=10)
        self._thread.shutdown(wait=True)

    async def _run(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)

    def _open(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = fresh_if_unreadable(self._database, self._connect, self._kept)
            self._prune()
        return self._connection

    def _connect(self) -> sqlite3.Connection:
        self._database.parent.mkdir(parents=True, exist_ok=True)
        connection = connect_autocommit(self._database)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(_SCHEMA)
        except BaseException:
            connection.close()
            raise
        return connection

    def _kept(self, bad: Path, exc: sqlite3.DatabaseError) -> None:
        log.error("the response store %s is not a database (%s): kept it as %s and started a new one",
                  self._database, exc, bad.name)  # fmt: skip

    def _prune(self) -> None:
        now = time.time()
        if now - self._pruned_at < _PRUNE_EVERY_S or self._connection is None:
            return
        self._pruned_at = now
        deleted = self._connection.execute(
            "DELETE FROM responses WHERE created_at < ?", (now - self._retention_s,)
        ).rowcount
        if deleted:
            log.info("deleted %d stored responses older than %d days", deleted, self._retention_s // 86400)

    def _put(self, stored: StoredResponse) -> None:
        connection = self._open()
        self._prune()
        connection.execute(
            "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
            (
                stored.id,
                stored.created_at,
                json.dumps(stored.response),
                json.dumps(stored.messages),
                json.dumps(stored.input_items),
            ),
        )

    def _get(self, response_id: str) -> StoredResponse | None:
        row = (
            self._open()
            .execute(
                "SELECT created_at, response, messages, input_items FROM responses WHERE id = ? AND created_at >= ?",
                (response_id, time.time() - self._retention_s),
            )
            .fetchone()
        )
        if row is None:
            return None
        items = json.loads(row[3]) if row[3] else []
        return StoredResponse(response_id, float(row[0]), json.loads(row[1]), json.loads(row[2]), items)

    def _delete(self, response_id: str) -> bool:
        return self._open().execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
