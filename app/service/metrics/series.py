"""Time series of the metrics pipeline: ring buffers in memory, downsampled for long windows.

Each series keeps one point a second for the last hour and one averaged point a minute for the last day, so a
window of 1 min or 10 min is read at full rate and 1 h or 24 h is read from fewer, coarser points. Memory is
bounded by the ring sizes whatever the uptime.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

RAW_KEEP_S = 3600
MINUTE_S = 60
MINUTE_KEEP = 24 * 60
DEFAULT_MAX_POINTS = 1200

Labels = tuple[tuple[str, str], ...]  # sorted (key, value) pairs: hashable, and one spelling per label set


@dataclass(frozen=True)
class Point:
    """One sampled value of one series."""

    name: str
    value: float
    labels: Labels = ()

    @staticmethod
    def of(name: str, value: float, **labels: str) -> Point:
        return Point(name, value, tuple(sorted(labels.items())))


@dataclass(frozen=True)
class SeriesData:
    """A series over a window, as the control API returns it."""

    name: str
    labels: dict[str, str]
    t: list[float]  # seconds since the epoch
    v: list[float]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "labels": self.labels, "t": self.t, "v": self.v}


class _Series:
    """One series: the raw ring, the minute ring, and the minute being averaged."""

    __slots__ = ("_bucket", "_count", "_sum", "minutes", "raw")

    def __init__(self, raw_keep: int) -> None:
        self.raw: deque[tuple[float, float]] = deque(maxlen=raw_keep)
        self.minutes: deque[tuple[float, float]] = deque(maxlen=MINUTE_KEEP)
        self._bucket: float | None = None
        self._sum = 0.0
        self._count = 0

    def add(self, t: float, value: float) -> tuple[float, float] | None:
        """Add a point; return the minute it closed (start time, average), if it closed one."""
        self.raw.append((t, value))
        bucket = t - t % MINUTE_S
        closed = None
        if self._bucket is not None and bucket != self._bucket and self._count:
            closed = (self._bucket, self._sum / self._count)
            self.minutes.append(closed)
            self._sum, self._count = 0.0, 0
        self._bucket = bucket
        self._sum += value
        self._count += 1
        return closed

    def read(self, since: float) -> list[tuple[float, float]]:
        # The raw ring reaches back to `since`, or holds all there is (no minute closed before its first point: a
        # series younger than the window, whose minutes would otherwise stand in for its own points).
        if self.raw and (self.raw[0][0] <= since or not self.minutes or self.minutes[0][0] + MINUTE_S > self.raw[0][0]):
            return [point for point in self.raw if point[0] >= since]
        # Older than the raw ring reaches: whole minutes, then the raw points after the last whole minute.
        older = [point for point in self.minutes if point[0] >= since]
        last_minute_end = older[-1][0] + MINUTE_S if older else since
        return older + [point for point in self.raw if point[0] >= last_minute_end]


def downsample(points: list[tuple[float, float]], max_points: int) -> list[tuple[float, float]]:
    """At most `max_points` points: consecutive groups averaged, so spikes flatten but totals keep their mean."""
    if len(points) <= max_points or max_points <= 0:
        return points
    size = math.ceil(len(points) / max_points)
    out = []
    for start in range(0, len(points), size):
        group = points[start : start + size]
        out.append((group[-1][0], sum(v for _, v in group) / len(group)))
    return out


class SeriesStore:
    """Every series of the service by name and labels. Not thread-safe: used from the event loop only."""

    def __init__(self, raw_keep_s: int = RAW_KEEP_S) -> None:
        self._raw_keep = raw_keep_s
        self._series: dict[tuple[str, Labels], _Series] = {}

    def add(self, t: float, points: Iterable[Point]) -> list[tuple[Point, float]]:
        """Add one tick's points at time `t`; return the minutes this closed, as (point, minute start)."""
        closed = []
        for point in points:
            key = (point.name, point.labels)
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series(self._raw_keep)
            minute = series.add(t, point.value)
            if minute is not None:
                closed.append((Point(point.name, minute[1], point.labels), minute[0]))
        return closed

    def restore(
        self, name: str, labels: Labels, raw: list[tuple[float, float]], minutes: list[tuple[float, float]]
    ) -> None:
        """Put back history read from disk (oldest first), before any live point is added."""
        series = self._series.setdefault((name, labels), _Series(self._raw_keep))
        series.minutes.extend(minutes)
        series.raw.extend(raw)

    def names(self) -> set[str]:
        return {name for name, _ in self._series}

    def query(
        self,
        since: float,
        names: set[str] | None = None,
        model: str | None = None,
        max_points: int = DEFAULT_MAX_POINTS,
    ) -> list[SeriesData]:
        """Series with points at or after `since`; optionally only some names, and only `model`'s series among
        those that belong to a model (machine-wide series such as GPU memory are always kept)."""
        out = []
        for (name, series_labels), series in self._series.items():
            if names is not None and name not in names:
                continue
            as_dict = dict(series_labels)
            if model is not None and as_dict.get("model", model) != model:
                continue
            points = downsample(series.read(since), max_points)
            if points:
                out.append(SeriesData(name, as_dict, [t for t, _ in points], [v for _, v in points]))
        return out
