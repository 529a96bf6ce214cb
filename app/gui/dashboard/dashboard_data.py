"""The dashboard's data, without Qt: fixed-capacity buffers per series, fed by `/api/series` answers and live
`sample` events, read as numpy views by the charts and written out as CSV."""

from __future__ import annotations

import csv
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.api_types import SampleEvent, SeriesAnswer

# Two hours at one point a second: an hour window never runs out, and memory stays bounded whatever the uptime.
CAPACITY = 7200

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # name, sorted labels: as the service keys its series


def series_key(name: str, labels: dict[str, str]) -> SeriesKey:
    return name, tuple(sorted(labels.items()))


def key_label(key: SeriesKey) -> str:
    """The series' raw name and labels, as the service and the CSV export spell them."""
    name, labels = key
    return " ".join([name, *(f"{k}={v}" for k, v in labels)])


# What a series measures, in words: the chart's title and axis already say the quantity and its unit.
_WHAT = {
    "generation_tokens_per_s": "generated",
    "prompt_tokens_per_s": "prompt read",
    "ttft_p50_s": "median",
    "ttft_p95_s": "95th percentile",
    "process_cpu_percent": "",
    "system_cpu_percent": "whole machine",
    "process_rss_bytes": "",
    "system_memory_used_bytes": "whole machine, used",
    "gpu_process_memory_bytes": "on GPU {gpu}",
    "gpu_memory_used_bytes": "GPU {gpu}, all programs",
    "gpu_memory_total_bytes": "GPU {gpu}, capacity",
    "engine_kv_cache_usage": "",
    "prompt_cache_reuse": "",
}


def series_title(key: SeriesKey) -> str:
    """A legend text in words: whose series it is (a model, the service) and what of the chart's quantity."""
    name, labels = key
    by_key = dict(labels)
    who = by_key.get("model") or ("ModelDeck service" if by_key.get("process") == "service" else "")
    if who == "other":
        who = "other programs"
    what = _WHAT.get(name, name.replace("_", " ")).format(gpu=by_key.get("gpu", "?"))
    return f"{who}: {what}" if who and what else who or what


def series_model(key: SeriesKey) -> str | None:
    """The model a series belongs to; None for the machine's and the service's own series."""
    model = dict(key[1]).get("model")
    return None if model in (None, "other") else model


class SeriesBuffer:
    """Time and value arrays allocated once; when full, the older half is dropped in one move."""

    __slots__ = ("_count", "_t", "_v", "changed")

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._t = np.empty(capacity)
        self._v = np.empty(capacity)
        self._count = 0
        self.changed = True

    def __len__(self) -> int:
        return self._count

    def replace(self, t: list[float], v: list[float]) -> None:
        count = min(len(t), len(self._t))
        self._t[:count] = t[len(t) - count :]
        self._v[:count] = v[len(v) - count :]
        self._count = count
        self.changed = True

    def append(self, t: float, v: float) -> None:
        if self._count and t <= self._t[self._count - 1]:
            return  # already there: a live sample that the history answer also held
        if self._count == len(self._t):
            keep = len(self._t) // 2
            self._t[:keep] = self._t[self._count - keep : self._count]
            self._v[:keep] = self._v[self._count - keep : self._count]
            self._count = keep
        self._t[self._count] = t
        self._v[self._count] = v
        self._count += 1
        self.changed = True

    def view(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """The points, oldest first. Views into the buffer: valid until the next append."""
        return self._t[: self._count], self._v[: self._count]

    def value_at(self, t: float) -> float | None:
        """The value of the point nearest to time `t`, if any."""
        if not self._count:
            return None
        times = self._t[: self._count]
        index = int(np.searchsorted(times, t))
        if index >= self._count or (index > 0 and t - times[index - 1] < times[index] - t):
            index -= 1
        return float(self._v[index])


class DashboardData:
    """Every series the dashboard knows, by key."""

    def __init__(self) -> None:
        self.buffers: dict[SeriesKey, SeriesBuffer] = {}
        self.latest_time = 0.0

    def load(self, answer: SeriesAnswer) -> None:
        """Take an `/api/series` answer: each series it holds replaces what was kept of it."""
        for series in answer.get("series", []):
            key = series_key(str(series["name"]), dict(series["labels"]))
            self._buffer(key).replace(series["t"], series["v"])
            if series["t"]:
                self.latest_time = max(self.latest_time, float(series["t"][-1]))

    def add_sample(self, event: SampleEvent) -> None:
        """Take one live `sample` event: {t, points: [[name, labels, value], ...]}."""
        t = float(event["t"])
        for name, labels, value in event["points"]:
            self._buffer(series_key(name, labels)).append(t, float(value))
        self.latest_time = max(self.latest_time, t)

    def _buffer(self, key: SeriesKey) -> SeriesBuffer:
        buffer = self.buffers.get(key)
        if buffer is None:
            buffer = self.buffers[key] = SeriesBuffer()
        return buffer

    def latest(self, name: str, since: float) -> list[tuple[SeriesKey, float]]:
        """The last value of each series called `name` whose last point is at or after `since`."""
        found = []
        for key, buffer in self.buffers.items():
            if key[0] == name and len(buffer):
                times, values = buffer.view()
                if times[-1] >= since:
                    found.append((key, float(values[-1])))
        return found

    def models(self) -> set[str]:
        return {value for _, labels in self.buffers for key, value in labels if key == "model"}

    def changed(self) -> Iterator[tuple[SeriesKey, SeriesBuffer]]:
        for key, buffer in self.buffers.items():
            if buffer.changed:
                yield key, buffer

    def write_csv(self, path: Path, keys: Iterable[SeriesKey], since: float) -> int:
        """Write the points at or after `since` of the given series as long-format CSV; return the rows."""
        rows = 0
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["time_utc", "unix_time", "series", "labels", "value"])
            for key in keys:
                times, values = self.buffers[key].view()
                start = int(np.searchsorted(times, since))
                labels = ";".join(f"{k}={v}" for k, v in key[1])
                for t, v in zip(times[start:], values[start:], strict=True):
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(t)))
                    writer.writerow([stamp, f"{t:.3f}", key[0], labels, repr(float(v))])
                    rows += 1
        return rows
