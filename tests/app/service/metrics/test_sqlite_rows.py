"""Many rows in few statements, each its own transaction: the writer threads hand the interpreter lock back
to the event loop once per statement, not once per row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.service.metrics.sqlite_rows import MAX_PARAMETERS, connect_autocommit, insert_rows

COLUMNS = [f"c{index}" for index in range(17)]  # as many as the request log has


def test_rows_go_in_order_in_as_few_statements_as_the_parameter_limit_allows(tmp_path: Path) -> None:
    connection = connect_autocommit(tmp_path / "rows.sqlite")
    try:
        connection.execute(f"CREATE TABLE t ({', '.join(COLUMNS)})")
        statements: list[str] = []
        connection.set_trace_callback(statements.append)
        rows = [(index, f"text {index}", None, index / 2, *range(13)) for index in range(150)]
        insert_rows(connection, "t", COLUMNS, rows)
        connection.set_trace_callback(None)
        per_statement = MAX_PARAMETERS // len(COLUMNS)
        assert len(statements) == -(-len(rows) // per_statement) == 3
        assert all(statement.startswith("INSERT INTO t") for statement in statements)  # no BEGIN, no COMMIT
        assert not connection.in_transaction
        stored = connection.execute(f"SELECT {', '.join(COLUMNS)} FROM t ORDER BY rowid").fetchall()
        assert stored == rows
    finally:
        connection.close()


def test_a_bad_row_fails_its_statement_and_says_so(tmp_path: Path) -> None:
    connection = connect_autocommit(tmp_path / "rows.sqlite")
    try:
        connection.execute("CREATE TABLE t (a NOT NULL, b)")
        insert_rows(connection, "t", ["a", "b"], [(1, 2)])
        with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
            insert_rows(connection, "t", ["a", "b"], [(3, 4), (None, 5)])
        # The failed statement was its own transaction: nothing of it stays, what came before does.
        assert connection.execute("SELECT a, b FROM t").fetchall() == [(1, 2)]
    finally:
        connection.close()
