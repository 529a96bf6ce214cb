"""The SQLite request log: records from this version land in a log an older version wrote."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import fields, replace
from pathlib import Path

import pytest

from app.service.events import EventBus
from app.service.metrics import request_log
from app.service.metrics.metering import MeteredRequest
from app.service.metrics.request_log import RequestLog
from app.service.metrics.request_text import RequestText
from tests.support.service import REPO
from tests.support.waiting import wait_for


def record(request_id: str) -> MeteredRequest:
    return MeteredRequest(
        id=request_id, time=1.0, model="m", route="/v1/completions", stream=False, status=200, queued_s=0.0,
        ttft_s=None, duration_s=0.1, prompt_tokens=3, completion_tokens=2, itl_p50_s=None, itl_max_s=None,
        decode_tps=None, error=None,
    )  # fmt: skip


def test_a_log_without_text_columns_gains_them(tmp_path: Path) -> None:
    database = tmp_path / "requests.sqlite"
    with sqlite3.connect(database) as old:
        old.execute(f"CREATE TABLE requests ({', '.join(f.name for f in fields(MeteredRequest))})")
        old.execute(f"INSERT INTO requests VALUES ({', '.join('?' * len(fields(MeteredRequest)))})",
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


FULL_DISK_SCRIPT = textwrap.dedent("""
    import logging, resource, signal, sqlite3, sys, threading, time
    from pathlib import Path
    from app.service.events import EventBus
    from app.service.metrics.request_log import RequestLog
    from app.service.metrics.request_text import RequestText
    from tests.app.service.metrics.test_request_log import record

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails (EFBIG) instead of killing
    database = Path(sys.argv[1])
    wal = database.with_name(database.name + "-wal")
    text = RequestText("/v1/completions", "x" * 20_000, stream=False, answer=[])

    def stored() -> int:
        reader = sqlite3.connect(database)
        try:
            return reader.execute("SELECT count(*) FROM requests").fetchone()[0]
        except sqlite3.OperationalError:  # the writer has not created the table yet
            return 0
        finally:
            reader.close()

    failed, recovered = threading.Event(), threading.Event()

    class Watch(logging.Handler):
        def emit(self, entry: logging.LogRecord) -> None:
            print(entry.getMessage(), file=sys.stderr, flush=True)
            (failed if "cannot write" in entry.getMessage() else recovered).set()

    logging.getLogger("modeldeck.requests").addHandler(Watch())
    log = RequestLog(database, EventBus())
    log.add(record("before"), text)
    while stored() < 1:
        time.sleep(0.05)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # The disk is full: no file of this process may grow past the largest one there now.
    resource.setrlimit(resource.RLIMIT_FSIZE, (max(database.stat().st_size, wal.stat().st_size), hard))
    for index in range(200):
        log.add(record(f"during-{index}"), text)
    assert failed.wait(30), "the writer never said that the disk refused the records"
    assert stored() == 1, stored()
    assert len(log.recent(1000)) == 201 and log.aggregates(time.time() + 1)["m"]["requests"] == 201
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space again
    log.add(record("after"))
    assert recovered.wait(30), "the writer never caught up"
    log.close()
    print("stored", stored(), flush=True)
""")


def test_a_full_disk_loses_no_request_record(tmp_path: Path) -> None:
    """The disk filling up is simulated with RLIMIT_FSIZE in a child process (no file may grow: SQLite's write fails
    as on a full disk, as "disk I/O error" rather than SQLITE_FULL; no mount needed). The writer keeps what it could
    not write, the service's in-memory records and aggregates go on, and everything is written once space returns."""
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK_SCRIPT, str(tmp_path / "requests.sqlite")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["stored", "202"], (result.stdout, result.stderr)
    assert "cannot write the request log" in result.stderr and "written again" in result.stderr


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


def test_flush_writes_what_is_pending_before_it_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop that cannot wait for close (a forced exit) asks for the pending records now, not at the next tick
    (made an hour here, so that only the flush can have written them)."""
    monkeypatch.setattr(request_log, "_FLUSH_S", 3600.0)
    database = tmp_path / "requests.sqlite"
    log = RequestLog(database, EventBus())
    try:
        log.add(record("first"))
        assert log.flush(10)
        assert stored_ids(database) == ["first"]
        log.add(record("second"))
        assert log.flush(10)
        assert stored_ids(database) == ["first", "second"]
    finally:
        log.close()


def stored_ids(database: Path) -> list[str]:
    reader = sqlite3.connect(database)
    try:
        return [row[0] for row in reader.execute("SELECT id FROM requests ORDER BY rowid")]
    finally:
        reader.close()


class Said(logging.Handler):
    """An event for each of `phrases`, set once the request log says it."""

    def __init__(self, *phrases: str) -> None:
        super().__init__()
        self.events = {phrase: threading.Event() for phrase in phrases}
        self.messages: list[str] = []

    def emit(self, entry: logging.LogRecord) -> None:
        self.messages.append(entry.getMessage())
        for phrase, event in self.events.items():
            if phrase in entry.getMessage():
                event.set()


def test_a_log_that_is_not_a_database_is_set_aside_and_a_fresh_one_takes_the_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    database = tmp_path / "requests.sqlite"
    garbage = os.urandom(8192)
    database.write_bytes(garbage)
    with caplog.at_level(logging.WARNING, logger="modeldeck.requests"):
        log = RequestLog(database, EventBus())
        log.add(record("after"))
        log.close()
    assert (tmp_path / "requests.sqlite.bad").read_bytes() == garbage  # nothing is lost
    assert stored_ids(database) == ["after"]
    assert stat.S_IMODE(database.stat().st_mode) == 0o600  # request text may be in it: private, as the service makes it
    [message] = [entry.getMessage() for entry in caplog.records]
    assert "is not a database" in message and "kept it as requests.sqlite.bad" in message


def test_a_log_locked_at_start_keeps_the_newest_records_in_memory_until_it_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the file locked before the writer has made its table: the writer says so, keeps what
    arrives (up to MAX_UNWRITTEN, the oldest going first), tries again on its clock, and writes what it kept once it
    opens."""
    monkeypatch.setattr(request_log, "MAX_UNWRITTEN", 3)
    database = tmp_path / "requests.sqlite"
    said = Said("cannot open the request log", "lost its 2 oldest", "written again (3 records caught up)")
    logging.getLogger("modeldeck.requests").addHandler(said)
    holder = sqlite3.connect(database, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        log = RequestLog(database, EventBus())
        try:
            for index in range(5):
                log.add(record(f"r{index}"))
            for phrase in ("cannot open the request log", "lost its 2 oldest"):
                assert said.events[phrase].wait(30), (phrase, said.messages)
            holder.execute("ROLLBACK")
            assert said.events["written again (3 records caught up)"].wait(30), said.messages
            assert stored_ids(database) == ["r2", "r3", "r4"]
            log.add(record("r5"))
            assert wait_for(lambda: stored_ids(database)[3:] == ["r5"], 10, "a record after the log opened")
        finally:
            log.close()
    finally:
        holder.close()
        logging.getLogger("modeldeck.requests").removeHandler(said)
    assert sum("cannot open" in message for message in said.messages) == 1, said.messages
