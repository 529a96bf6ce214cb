"""The metrics pipeline: one loop that runs every sampler each tick, keeps the points in the series store and
on disk, and publishes them as live `sample` events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from app.hardware.gpu_sampling import NvmlSampler
from app.service.engines import EngineManager
from app.service.events import EventBus
from app.service.metrics.remote_metrics import RemoteScraper
from app.service.metrics.request_log import RequestLog
from app.service.metrics.sampling import EngineScraper, GatewaySampler, ProcessSampler, gpu_points
from app.service.metrics.series import DEFAULT_MAX_POINTS, Point, SeriesStore
from app.service.metrics.series_history import SeriesHistory

log = logging.getLogger("modeldeck.metrics")

DEFAULT_INTERVAL_S = 1.0


@dataclass
class PipelineStats:
    """What the samplers cost: CPU seconds of the event loop thread spent sampling, over how many ticks."""

    ticks: int = 0
    cpu_s: float = 0.0
    gpu_cpu_s: float = 0.0  # NVML reads run on a worker thread; their own thread time


class MetricsPipeline:
    """Owns the samplers, the series store and its history. `start()` and `stop()` are safe to call twice."""

    def __init__(
        self,
        manager: EngineManager,
        bus: EventBus,
        request_log: RequestLog,
        session: aiohttp.ClientSession,
        history: SeriesHistory | None,
        interval_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._bus = bus
        self._history = history
        self.interval_s = interval_s
        self.store = SeriesStore()
        self.stats = PipelineStats()
        self._gateway = GatewaySampler(manager)
        self._processes = ProcessSampler(manager)
        self._engines = EngineScraper(manager, session)
        self._remotes = RemoteScraper(manager, session)
        self._gpus = NvmlSampler()
        self._has_gpus = False
        self._task: asyncio.Task[None] | None = None
        request_log.add_listener(self._gateway.on_record)
        request_log.add_stream_listener(self._gateway.on_streamed)

    async def start(self) -> None:
        if self._task is not None:
            return
        self._has_gpus = await asyncio.to_thread(self._gpus.open)
        if self._history is not None:
            try:
                restored = await asyncio.to_thread(self._history.load_into, self.store, time.time())
            except sqlite3.Error as exc:
                # Charts without yesterday beat no service: the file is left for the user to inspect or delete.
                log.error("metrics history unreadable, running without it: %s", exc)
                self._history = None
            else:
                log.info("metrics history: %d series restored", restored)
                self._history.start()
        self._task = asyncio.create_task(self._run(), name="metrics-pipeline")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self._history is not None:
            await asyncio.to_thread(self._history.close)
        await asyncio.to_thread(self._gpus.close)

    def query(self, window_s: float, names: set[str] | None, model: str | None, max_points: int) -> dict[str, Any]:
        now = time.time()
        series = self.store.query(now - window_s, names, model, max_points)
        stats = {"ticks": self.stats.ticks, "cpu_s": self.stats.cpu_s, "gpu_cpu_s": self.stats.gpu_cpu_s}
        return {"window_s": window_s, "now": now, "interval_s": self.interval_s, "sampler": stats,
                "series": [s.to_dict() for s in series]}  # fmt: skip

    async def _run(self) -> None:
        previous = time.monotonic()
        next_tick = previous + self.interval_s
        while True:
            # Ticks keep to a grid, so a slow tick does not shift every later one.
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
            next_tick += self.interval_s
            now = time.monotonic()
            if now > next_tick:  # the loop was blocked for more than a tick: skip the missed ones
                next_tick = now + self.interval_s
            elapsed, previous = now - previous, now
            await self.tick(elapsed)

    async def tick(self, elapsed_s: float) -> list[Point]:
        """Sample once, store and publish; `elapsed_s` is the time the rates are over."""
        # CPU is counted over the synchronous parts only: across an await, other requests run on this thread.
        started = time.thread_time()
        t = time.time()
        engine_pids = self._processes.engine_pids()
        points = self._gateway.sample(elapsed_s) + self._processes.sample(engine_pids)
        cpu = time.thread_time() - started
        engines, remotes = await asyncio.gather(self._engines.sample(engine_pids), self._remotes.sample())
        points += engines + remotes
        if self._has_gpus:
            readings, gpu_cpu = await asyncio.to_thread(_timed_read, self._gpus)
            self.stats.gpu_cpu_s += gpu_cpu
            points += gpu_points(readings, engine_pids)
        started = time.thread_time()
        minutes = self.store.add(t, points)
        if self._history is not None:
            self._history.add(t, points, minutes)
        if self._bus.has_subscribers:
            self._bus.publish({"type": "sample", "t": t,
                               "points": [[p.name, dict(p.labels), p.value] for p in points]})  # fmt: skip
        self.stats.ticks += 1
        self.stats.cpu_s += cpu + time.thread_time() - started
        return points


def _timed_read(sampler: NvmlSampler) -> tuple[list[Any], float]:
    started = time.thread_time()
    readings = sampler.read()
    return readings, time.thread_time() - started


__all__ = ["DEFAULT_MAX_POINTS", "MetricsPipeline", "PipelineStats"]
