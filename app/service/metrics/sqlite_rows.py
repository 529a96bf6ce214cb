"""Rows into SQLite from a writer thread that shares the interpreter with the event loop, in few statements.

Python's sqlite3 lets go of the interpreter lock (GIL) around every step of a statement and takes it back after,
so `executemany` of N rows inside BEGIN ... COMMIT hands the lock between the writer and the event loop N + 2
times. When both threads share one busy core, each handoff can keep the loop waiting for the writer to be
scheduled: a millisecond or more while every stream through the gateway waits. One INSERT with many VALUES rows,
on a connection in autocommit mode, is one step and its own transaction.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# SQLite's default limit on parameters per statement before 3.32; later builds allow 32766.
MAX_PARAMETERS = 999


def connect_autocommit(database: Path) -> sqlite3.Connection:
    """A connection that runs each statement as its own transaction: no BEGIN or COMMIT steps around it."""
    return sqlite3.connect(database, isolation_level=None)


def insert_rows(
    connection: sqlite3.Connection, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """Insert `rows` (each a value per column) with as few statements as the parameter limit allows."""
    per_statement = max(1, MAX_PARAMETERS // len(columns))
    for start in range(0, len(rows), per_statement):
        chunk = rows[start : start + per_statement]
        values = [value for row in chunk for value in row]
        connection.execute(_insert(table, tuple(columns), len(chunk)), values)


@functools.lru_cache(maxsize=256)
def _insert(table: str, columns: tuple[str, ...], count: int) -> str:
    row = "(" + ", ".join("?" * len(columns)) + ")"
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row] * count)}"
