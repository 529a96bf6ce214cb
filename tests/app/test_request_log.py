"""The SQLite request log: records from this version land in a log an older version wrote."""

from __future__ import annotations

import sqlite3
from dataclasses import fields
from pathlib import Path

from app.service.events import EventBus
from app.service.metering import RequestRecord
from app.service.request_log import RequestLog
from app.service.request_text import RequestText
from tests.conftest import wait_for


def record(request_id: str) -> RequestRecord:
    return RequestRecord(
        id=request_id, time=1.0, model="m", route="/v1/completions", stream=False, status=200, queued_s=0.0,
        ttft_s=None, duration_s=0.1, prompt_tokens=3, completion_tokens=2, itl_p50_s=None, itl_max_s=None,
        decode_tps=None, error=None,
    )  # fmt: skip


def test_a_log_without_text_columns_gains_them(tmp_path: Path) -> None:
    database = tmp_path / "requests.sqlite"
    with sqlite3.connect(database) as old:
        old.execute(f"CREATE TABLE requests ({', '.join(f.name for f in fields(RequestRecord))})")
        old.execute(f"INSERT INTO requests VALUES ({', '.join('?' * len(fields(RequestRecord)))})",
                    tuple(vars(record("old")).values()))  # fmt: skip
    old.close()
    log = RequestLog(database, EventBus())
    text = RequestText("/v1/completions", "Once", stream=False, answer=[b'{"choices": [{"text": " upon"}]}'])
    log.add(record("new"), text)
    log.add(record("plain"))
    log.close()
    with sqlite3.connect(database) as reopened:
        rows = reopened.execute("SELECT id, prompt_text, completion_text FROM requests ORDER BY rowid").fetchall()
    reopened.close()
    assert rows == [("old", None, None), ("new", '"Once"', " upon"), ("plain", None, None)]


def test_records_reach_disk_while_the_log_stays_open_and_in_order(tmp_path: Path) -> None:
    """The writer takes what piled up on its own clock: no close needed, and more records than one SQLite
    statement holds all land, in the order they came."""
    database = tmp_path / "requests.sqlite"
    log = RequestLog(database, EventBus())
    try:
        for index in range(150):
            log.add(record(f"r{index}"))

        def stored() -> list[str]:
            reader = sqlite3.connect(database)
            try:
                ids = [row[0] for row in reader.execute("SELECT id FROM requests ORDER BY rowid")]
            except sqlite3.OperationalError:  # the writer has not created the table yet
                return []
            finally:
                reader.close()
            return ids if len(ids) == 150 else []

        assert wait_for(stored, 10, "150 records in SQLite") == [f"r{index}" for index in range(150)]
    finally:
        log.close()
