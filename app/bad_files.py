"""A file of ours that cannot be read is set aside, never written over: what it held stays for the user to mend."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from app.paths import make_private_file

T = TypeVar("T")


def set_aside(path: Path, companions: tuple[str, ...] = ()) -> Path:
    """Move `path` to the first free name beside it, `NAME.bad`, `NAME.bad-2`, ... (an earlier bad copy is kept),
    and return that path. Each file named `NAME` + one of `companions` (SQLite's "-wal", "-shm") goes with it, to
    the new name + the same ending, so the kept files still belong together."""
    number = 1
    while True:
        bad = path.with_name(f"{path.name}.bad" if number == 1 else f"{path.name}.bad-{number}")
        if not any(bad.with_name(bad.name + ending).exists() for ending in ("", *companions)):
            os.replace(path, bad)
            for ending in companions:
                companion = path.with_name(path.name + ending)
                if companion.exists():
                    os.replace(companion, bad.with_name(bad.name + ending))
            return bad
        number += 1


def set_aside_database(path: Path, companions: tuple[str, ...] = ()) -> Path:
    """`set_aside` for an SQLite file, with an empty file in its place that only this user may read (as the service
    makes its databases), for SQLite to make a fresh database of."""
    bad = set_aside(path, companions)
    make_private_file(path)
    return bad


def fresh_if_unreadable(
    path: Path,
    attempt: Callable[[], T],
    kept: Callable[[Path, sqlite3.DatabaseError], None],
    companions: tuple[str, ...] = (),
) -> T:
    """`attempt()` on the SQLite file at `path`; when SQLite refuses the file itself, it is set aside (its new name
    and the error told to `kept`) and `attempt()` runs once more, on a fresh file. Any other error is raised."""
    try:
        return attempt()
    except sqlite3.DatabaseError as exc:
        if not unreadable_database(exc):
            raise
        kept(set_aside_database(path, companions), exc)
    return attempt()


def sqlite_code(error: sqlite3.Error) -> int:
    """SQLite's primary result code of `error` (its extended codes keep the primary in the low byte)."""
    return getattr(error, "sqlite_errorcode", 0) & 0xFF


def unreadable_database(error: sqlite3.Error) -> bool:
    """Whether SQLite refused the file itself (not a database, malformed), not its state (locked, full, read-only)."""
    return sqlite_code(error) in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT)
