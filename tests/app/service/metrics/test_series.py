"""Ring buffers, minute averages, downsampling, and the SQLite history with its compaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.service.metrics.series import MINUTE_S, Point, SeriesStore, downsample
from app.service.metrics.series_history import SeriesHistory, compact
from tests.support.waiting import wait_for

T0 = 1_700_000_040.0  # a whole minute


def test_raw_ring_is_bounded_and_long_windows_read_minutes() -> None:
    store = SeriesStore(raw_keep_s=600)
    for second in range(3 * 3600):
        store.add(T0 + second, [Point.of("x", float(second % 120), model="m")])
    now = T0 + 3 * 3600 - 1
    last_ten = store.query(now - 599, max_points=10_000)[0]
    assert len(last_ten.t) == 600 and last_ten.v[-1] == float((3 * 3600 - 1) % 120)
    day = store.query(now - 24 * 3600, max_points=10_000)[0]
    # 179 whole minutes, then the raw points of the minute still open.
    assert len(day.t) == 179 + 60
    assert day.v[0] == sum(range(60)) / 60  # minute 0 holds seconds 0..59


def test_model_filter_keeps_machine_wide_series() -> None:
    store = SeriesStore()
    store.add(T0, [Point.of("rate", 1.0, model="a"), Point.of("rate", 2.0, model="b"), Point.of("gpu", 3.0, gpu="0")])
    found = {(s.name, s.labels.get("model")) for s in store.query(T0 - 1, model="a")}
    assert found == {("rate", "a"), ("gpu", None)}


def test_downsample_keeps_the_mean() -> None:
    points = [(float(t), float(t % 10)) for t in range(3600)]
    reduced = downsample(points, 360)
    assert len(reduced) == 360
    assert sum(v for _, v in reduced) / 360 == sum(v for _, v in points) / 3600


def test_history_round_trip_and_compaction(tmp_path: Path) -> None:
    database = tmp_path / "metrics.sqlite"
    store = SeriesStore()
    history = SeriesHistory(database)
    history.load_into(store, T0)
    history.start()
    for second in range(150):
        t = T0 + second
        points = [Point.of("x", 2.0, model="m")]
        history.add(t, points, store.add(t, points))
    history.close()
    restored = SeriesStore()
    assert SeriesHistory(database).load_into(restored, T0 + 150) == 1
    series = restored.query(T0, max_points=10_000)[0]
    assert len(series.t) == 150 and set(series.v) == {2.0}
    connection = sqlite3.connect(database)
    try:
        minutes = connection.execute("SELECT COUNT(*) FROM samples WHERE tier = 'm'").fetchone()[0]
        assert minutes == 2  # two minutes closed; the third is still open
        assert compact(connection, T0 + 3600 + 100) == (100, 0)  # seconds older than an hour go
        assert compact(connection, T0 + 8 * 24 * 3600) == (50, 2)
    finally:
        connection.close()
    assert MINUTE_S == 60


def test_an_unreadable_history_file_is_an_error_the_pipeline_can_catch(tmp_path: Path) -> None:
    database = tmp_path / "metrics.sqlite"
    database.write_bytes(b"this is not a database" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        SeriesHistory(database).load_into(SeriesStore(), T0)


@pytest.mark.parametrize("labels", ["", "{", "[]", "7", '{"model": 1}', b"\xff", "[" * 100_000])
def test_a_row_with_unreadable_labels_costs_only_its_series(tmp_path: Path, labels: object) -> None:
    """Charts without one damaged series beat no service: `serve` restores the rest and starts."""
    database = tmp_path / "metrics.sqlite"
    SeriesHistory(database).load_into(SeriesStore(), T0)  # makes the table
    with sqlite3.connect(database) as connection:
        connection.executemany("INSERT INTO samples VALUES ('s', ?, ?, ?, 1.0)",
                               [("x", '{"model":"m"}', T0), ("y", labels, T0)])  # fmt: skip
    connection.close()
    restored = SeriesStore()
    assert SeriesHistory(database).load_into(restored, T0 + 1) == 1
    assert [(series.name, series.labels) for series in restored.query(T0 - 1)] == [("x", {"model": "m"})]


def test_ticks_reach_disk_while_the_history_stays_open(tmp_path: Path) -> None:
    """The writer takes the ticks that piled up on its own clock, with no call from the event loop."""
    database = tmp_path / "metrics.sqlite"
    store, history = SeriesStore(), SeriesHistory(database, compact_every_s=1e9)  # T0's seconds are old
    history.load_into(store, T0)
    history.start()
    try:
        for second in range(300):
            t = T0 + second
            points = [Point.of("x", float(second), model="m"), Point.of("y", 1.0, gpu="0")]
            history.add(t, points, store.add(t, points))

        def seconds() -> int:
            with sqlite3.connect(database) as reader:
                count: int = reader.execute("SELECT COUNT(*) FROM samples WHERE tier = 's'").fetchone()[0]
            reader.close()
            return count

        assert wait_for(lambda: seconds() == 600, 10, "600 second rows in SQLite")
    finally:
        history.close()
    restored = SeriesStore()
    assert SeriesHistory(database).load_into(restored, T0 + 300) == 2
    x = next(series for series in restored.query(T0, max_points=10_000) if series.name == "x")
    assert x.v == [float(second) for second in range(300)]


def test_a_series_younger_than_the_window_reads_its_own_points_after_a_minute_closed() -> None:
    """Seen on a busy machine: a service 62 s old asked for 120 s got the closed minute's average in place of
    its 60 one-second points, so a stream of those seconds showed as one flat point."""
    store = SeriesStore()
    start = T0 - 2  # two seconds before a whole minute
    for second in range(62):
        store.add(start + second, [Point.of("rate", float(second), model="m")])
    found = store.query(start + 61 - 120, max_points=10_000)[0]
    assert found.t == [start + second for second in range(62)]
    assert found.v == [float(second) for second in range(62)]
