"""The SQLite request log: records from this version land in a log an older version wrote."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import fields, replace
from pathlib import Path

from app.service.events import EventBus
from app.service.metering import RequestRecord
from app.service.request_log import RequestLog
from app.service.request_text import RequestText


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


def test_cache_reuse_is_over_requests_whose_engine_reported_it_and_unknown_otherwise(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests.sqlite", EventBus())
    now = time.time()
    log.add(replace(record("a"), time=now, model="no-cache-info"))
    log.add(replace(record("b"), time=now, model="llama", prompt_tokens=100, prompt_cached_tokens=0, slot=1))
    log.add(replace(record("c"), time=now, model="llama", prompt_tokens=300, prompt_cached_tokens=240, slot=1))
    log.add(replace(record("d"), time=now, model="llama", prompt_tokens=50))  # this one reported nothing
    summary = log.aggregates(60)
    assert summary["no-cache-info"]["prompt_cache_reuse"] is None  # unknown, not 0
    assert summary["no-cache-info"]["prompt_cached_tokens"] is None
    assert summary["llama"]["prompt_cached_tokens"] == 240
    assert summary["llama"]["prompt_cache_reuse"] == 240 / 400
    assert 'modeldeck_tokens_total{model="llama",kind="prompt_cached"} 240' in log.prometheus({})
    log.close()
    with sqlite3.connect(tmp_path / "requests.sqlite") as database:
        rows = database.execute("SELECT id, prompt_cached_tokens, slot FROM requests ORDER BY rowid").fetchall()
    database.close()
    assert rows == [("a", None, None), ("b", 0, 1), ("c", 240, 1), ("d", None, None)]
