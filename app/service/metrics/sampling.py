"""The samplers of the metrics pipeline. Each returns this tick's points; none keeps more than it needs.

Series names (labels in braces):
- gateway, per model: generation_tokens_per_s, prompt_tokens_per_s, requests_per_s, generation_tokens_total,
  prompt_tokens_total, ttft_p50_s, ttft_p95_s, itl_p50_s, prompt_cache_reuse (the share of prompt tokens the engine
  took from its cache, only where the engine reports it) (over the last minute), requests_running,
  requests_waiting {model}
- processes: process_cpu_percent, process_rss_bytes {model} for each engine, {process=service} for the service;
  system_cpu_percent, system_memory_used_bytes, system_memory_total_bytes
- GPUs (only where NVML runs): gpu_memory_used_bytes, gpu_memory_total_bytes, gpu_utilization_percent,
  gpu_temperature_c, gpu_power_w {gpu}; gpu_process_memory_bytes {gpu, model} (model "other": not ours)
- engines' own /metrics, translated by engines.metrics: engine_<name> {model}, e.g. engine_kv_cache_usage
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import psutil

from app.hardware.gpu_sampling import GPUReading
from app.service.engines import EngineManager
from app.service.metrics.metering import MeteredRequest, cache_reuse, percentile
from app.service.metrics.series import Point
from engines.metrics import METRICS_CONFIGS, MetricTranslator
from engines.states import EngineState

log = logging.getLogger("modeldeck.metrics")

LATENCY_WINDOW_S = 60.0
SCRAPE_TIMEOUT_S = 0.8
CHILDREN_REFRESH_S = 10.0


@dataclass
class _ModelCounts:
    prompt_total: int = 0
    completion_total: int = 0
    prompt_at_tick: int = 0
    completion_at_tick: int = 0
    requests_since_tick: int = 0


class GatewaySampler:
    """Token rates, request rates and latency percentiles from the records the gateway writes."""

    def __init__(self, manager: EngineManager) -> None:
        self._manager = manager
        self._counts: dict[str, _ModelCounts] = {}
        self._latencies: deque[tuple[float, str, float | None, float | None]] = deque()  # time, model, ttft, itl
        self._caching: deque[tuple[float, str, int, int]] = deque()  # time, model, cached and prompt tokens

    def on_record(self, record: MeteredRequest) -> None:
        """RequestLog listener: runs on the event loop for every finished request, so it only adds."""
        counts = self._counts.setdefault(record.model, _ModelCounts())
        counts.prompt_total += record.prompt_tokens or 0
        # What a stream's meter booked as it flowed is there already; usage may count a few tokens more.
        counts.completion_total += max(0, (record.completion_tokens or 0) - record.streamed_tokens)
        counts.requests_since_tick += 1
        if record.ttft_s is not None or record.itl_p50_s is not None:
            self._latencies.append((time.monotonic(), record.model, record.ttft_s, record.itl_p50_s))
        if record.prompt_cached_tokens is not None and record.prompt_tokens:
            self._caching.append((time.monotonic(), record.model, record.prompt_cached_tokens, record.prompt_tokens))

    def on_streamed(self, model: str, count: int) -> None:
        """RequestLog stream listener: a chunk's content events, booked now so a long stream reads as a plateau."""
        counts = self._counts.get(model)
        if counts is None:
            counts = self._counts[model] = _ModelCounts()
        counts.completion_total += count

    def sample(self, elapsed_s: float) -> list[Point]:
        points: list[Point] = []
        cutoff = time.monotonic() - LATENCY_WINDOW_S
        while self._latencies and self._latencies[0][0] < cutoff:
            self._latencies.popleft()
        while self._caching and self._caching[0][0] < cutoff:
            self._caching.popleft()
        queues = self._manager.queue_depths()
        for model in self._counts.keys() | queues.keys():
            counts = self._counts.setdefault(model, _ModelCounts())
            prompt = counts.prompt_total - counts.prompt_at_tick
            completion = counts.completion_total - counts.completion_at_tick
            points += [
                Point.of("generation_tokens_per_s", completion / elapsed_s, model=model),
                Point.of("prompt_tokens_per_s", prompt / elapsed_s, model=model),
                Point.of("requests_per_s", counts.requests_since_tick / elapsed_s, model=model),
                Point.of("generation_tokens_total", counts.completion_total, model=model),
                Point.of("prompt_tokens_total", counts.prompt_total, model=model),
            ]
            counts.prompt_at_tick, counts.completion_at_tick = counts.prompt_total, counts.completion_total
            counts.requests_since_tick = 0
            running, waiting = queues.get(model, (0, 0))
            points += [Point.of("requests_running", running, model=model),
                       Point.of("requests_waiting", waiting, model=model)]  # fmt: skip
            points += self._latency_points(model)
        return points

    def _latency_points(self, model: str) -> Iterator[Point]:
        ttfts = [ttft for _, m, ttft, _ in self._latencies if m == model and ttft is not None]
        itls = [itl for _, m, _, itl in self._latencies if m == model and itl is not None]
        wanted = (("ttft_p50_s", ttfts, 0.5), ("ttft_p95_s", ttfts, 0.95), ("itl_p50_s", itls, 0.5))
        for name, values, fraction in wanted:
            value = percentile(values, fraction)
            if value is not None:
                yield Point.of(name, value, model=model)
        cache = cache_reuse((cached, prompt) for _, m, cached, prompt in self._caching if m == model)
        if cache is not None:
            yield Point.of("prompt_cache_reuse", cache[1], model=model)


class ProcessSampler:
    """CPU and resident memory of the service, of each engine process (with its children) and of the machine."""

    def __init__(self, manager: EngineManager) -> None:
        self._manager = manager
        self._service = psutil.Process()
        self._processes: dict[int, psutil.Process] = {}
        self._children: dict[int, tuple[float, list[psutil.Process]]] = {}
        psutil.cpu_percent(None)  # the first call only sets the baseline
        self._service.cpu_percent(None)

    def engine_pids(self) -> dict[int, str]:
        pids = {}
        for model_id in self._manager.models:
            supervisor = self._manager.supervisor(model_id)
            if supervisor is not None and supervisor.pid is not None:
                pids[supervisor.pid] = model_id
        return pids

    def sample(self, engine_pids: dict[int, str]) -> list[Point]:
        memory = psutil.virtual_memory()
        points = [
            Point.of("system_cpu_percent", psutil.cpu_percent(None)),
            Point.of("system_memory_used_bytes", memory.total - memory.available),
            Point.of("system_memory_total_bytes", memory.total),
            Point.of("process_cpu_percent", self._service.cpu_percent(None), process="service"),
            Point.of("process_rss_bytes", self._service.memory_info().rss, process="service"),
        ]
        for pid in self._processes.keys() - engine_pids.keys():
            del self._processes[pid]
            self._children.pop(pid, None)
        for pid, model_id in engine_pids.items():
            measured = self._measure(pid)
            if measured is not None:
                points += [Point.of("process_cpu_percent", measured[0], model=model_id),
                           Point.of("process_rss_bytes", measured[1], model=model_id)]  # fmt: skip
        return points

    def _measure(self, pid: int) -> tuple[float, int] | None:
        """CPU percent and RSS of an engine and its children (vLLM runs its workers as children)."""
        process = self._processes.get(pid)
        first = process is None
        try:
            if process is None:
                process = self._processes[pid] = psutil.Process(pid)
            cpu, rss = process.cpu_percent(None), process.memory_info().rss
            for child in self._engine_children(pid, process):
                try:
                    cpu, rss = cpu + child.cpu_percent(None), rss + child.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            self._processes.pop(pid, None)
            return None
        return None if first else (cpu, rss)  # a first cpu_percent is always 0.0: no point rather than a lie

    def _engine_children(self, pid: int, process: psutil.Process) -> list[psutil.Process]:
        # Listing children scans every process on the machine: do it now and then, not every tick.
        listed_at, children = self._children.get(pid, (0.0, []))
        if time.monotonic() - listed_at >= CHILDREN_REFRESH_S:
            known = {child.pid: child for child in children}
            children = [known.get(child.pid, child) for child in process.children(recursive=True)]
            self._children[pid] = (time.monotonic(), children)
        return children


def gpu_points(readings: list[GPUReading], engine_pids: dict[int, str]) -> list[Point]:
    """Points for each GPU, and its memory split by process: ours by model, everyone else's as "other"."""
    points = []
    for gpu in readings:
        index = str(gpu.index)
        points += [Point.of("gpu_memory_used_bytes", gpu.memory_used, gpu=index),
                   Point.of("gpu_memory_total_bytes", gpu.memory_total, gpu=index)]  # fmt: skip
        for name, value in (("gpu_utilization_percent", gpu.utilization_percent),
                            ("gpu_temperature_c", gpu.temperature_c), ("gpu_power_w", gpu.power_w)):  # fmt: skip
            if value is not None:
                points.append(Point.of(name, value, gpu=index))
        by_model: dict[str, int] = {}
        for pid, used in gpu.process_memory.items():
            owner = engine_pids.get(pid, "other")
            by_model[owner] = by_model.get(owner, 0) + used
        points += [Point.of("gpu_process_memory_bytes", used, gpu=index, model=m) for m, used in by_model.items()]
    return points


class EngineScraper:
    """Scrapes the /metrics of each ready engine that has a metrics table, and translates it to our names."""

    def __init__(self, manager: EngineManager, session: aiohttp.ClientSession) -> None:
        self._manager = manager
        self._session = session
        self._translators: dict[tuple[str, int], MetricTranslator] = {}
        self._failing: set[str] = set()

    async def sample(self, engine_pids: dict[int, str]) -> list[Point]:
        targets = []
        for pid, model_id in engine_pids.items():
            config = METRICS_CONFIGS.get(self._manager.engine_name(model_id))
            url = self._manager.base_url(model_id)
            if config is None or url is None or self._manager.state(model_id) != EngineState.READY:
                continue
            translator = self._translators.setdefault((model_id, pid), MetricTranslator(config))
            targets.append((model_id, url.rstrip("/") + config.path, translator))
        # A restarted engine is a new pid: its counters start again, so its old translator goes.
        live = {(model_id, pid) for pid, model_id in engine_pids.items()}
        for key in self._translators.keys() - live:
            del self._translators[key]
        results = await asyncio.gather(*(self.scrape(*target) for target in targets))
        return [point for result in results for point in result]

    async def scrape(self, model_id: str, url: str, translator: MetricTranslator) -> list[Point]:
        """One engine's /metrics in our names, or nothing (said once in the log) when it does not answer."""
        headers = {"Authorization": f"Bearer {self._manager.internal_key}"}
        try:
            async with self._session.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
            ) as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            if model_id not in self._failing:  # once per failing spell, not once a second
                log.warning("metrics of %s unavailable at %s: %s", model_id, url, exc)
                self._failing.add(model_id)
            return []
        self._failing.discard(model_id)
        values = translator.translate(text, time.monotonic())
        return [Point.of(f"engine_{name}", value, model=model_id) for name, value in values.items()]
