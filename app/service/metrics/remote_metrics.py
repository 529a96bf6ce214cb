"""Remote endpoints' own /metrics in the dashboard's vocabulary: each scrape is translated with the table of the
engine whose names it carries (engines.metrics: vLLM's `vllm:*`, llama-server's `llamacpp:*`), and its points are
labelled with the remote's first model (a vLLM server serves one model, under one or more names)."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from app.service.engines import EngineManager
from app.service.metrics.series import Point
from app.service.remotes import RemoteEndpoint, read_bounded
from engines.metrics import METRICS_CONFIGS, MetricsConfig, MetricTranslator

log = logging.getLogger("modeldeck.metrics")

SCRAPE_TIMEOUT_S = 2.0
MAX_SCRAPE_BYTES = 4 * 1024 * 1024  # an exposition of a few thousand series


def config_for(text: str) -> MetricsConfig | None:
    """The metrics table whose engine's names appear in this exposition, or None for one we cannot read."""
    for config in METRICS_CONFIGS.values():
        prefix = config.rules[0].source.split(":")[0] + ":"
        if any(line.startswith(prefix) for line in text.splitlines()):
            return config
    return None


class RemoteScraper:
    """Scrapes every remote's /metrics once a tick; a remote without readable metrics gives no points."""

    def __init__(self, manager: EngineManager, session: aiohttp.ClientSession) -> None:
        self._manager = manager
        self._session = session
        self._translators: dict[str, tuple[str, MetricTranslator]] = {}  # remote name -> (its URL, translator)
        self._failing: set[str] = set()

    async def sample(self) -> list[Point]:
        remotes = [r for r in self._manager.remotes.values() if r.models]
        for name in self._translators.keys() - {r.name for r in remotes}:
            del self._translators[name]
        results = await asyncio.gather(*(self.scrape(remote) for remote in remotes))
        return [point for result in results for point in result]

    async def scrape(self, remote: RemoteEndpoint) -> list[Point]:
        headers = {"Authorization": f"Bearer {remote.api_key}"} if remote.api_key else {}
        try:
            async with self._session.get(
                remote.url + "/metrics", headers=headers, timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_S)
            ) as response:
                if response.status != 200:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                raw = await read_bounded(response, MAX_SCRAPE_BYTES)
                if raw is None:
                    raise aiohttp.ClientPayloadError(f"an exposition over {MAX_SCRAPE_BYTES} bytes")
                text = raw.decode("utf-8", errors="replace")
        except (aiohttp.ClientError, TimeoutError) as exc:
            if remote.name not in self._failing:  # once per failing spell, not once a second
                log.warning("metrics of remote %s unavailable at %s/metrics: %s", remote.name, remote.url, exc)
                self._failing.add(remote.name)
            return []
        self._failing.discard(remote.name)
        known = self._translators.get(remote.name)
        if known is None or known[0] != remote.url:
            config = config_for(text)
            if config is None:
                return []
            known = self._translators[remote.name] = (remote.url, MetricTranslator(config))
        values = known[1].translate(text, time.monotonic())
        model = f"{remote.name}/{remote.models[0]}"
        return [Point.of(f"engine_{name}", value, model=model) for name, value in values.items()]
