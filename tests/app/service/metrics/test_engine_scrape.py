"""Scraping an engine's /metrics over HTTP: the engine's key is sent, names are translated, counters become
rates across scrapes, and an engine that stops answering gives no points (and one log line, not one a second).
The server stands in for vLLM, which cannot run here; it serves the recorded exposition."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from app.paths import AppPaths
from app.service.engines import EngineManager
from app.service.events import EventBus
from app.service.metrics.sampling import EngineScraper
from app.service.metrics.series import Point
from engines.metrics import VLLM, MetricTranslator

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "metrics" / "vllm_metrics.txt"


class StandInVLLM:
    def __init__(self, key: str) -> None:
        self.key = key
        self.generated = 3400
        self.up = True

    async def metrics(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.Response(status=401)
        if not self.up:
            return web.Response(status=503)
        text = FIXTURE.read_text(encoding="utf-8").replace("} 3400.0", f"}} {self.generated}.0")
        return web.Response(text=text, content_type="text/plain")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client_session:
        yield client_session


async def test_scrape_translates_and_rates(
    paths: AppPaths, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    manager = EngineManager({}, paths, EventBus())
    engine = StandInVLLM(manager.internal_key)
    app = web.Application()
    app.router.add_get("/metrics", engine.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        scraper = EngineScraper(manager, session)
        translator = MetricTranslator(VLLM)
        started = time.monotonic()
        first = await scraper.scrape("big", url, translator)
        assert Point.of("engine_kv_cache_usage", 0.425, model="big") in first
        assert not [p for p in first if p.name == "engine_generation_tokens_per_s"]
        engine.generated += 500
        second = await scraper.scrape("big", url, translator)
        outer = time.monotonic() - started
        rate = next(p.value for p in second if p.name == "engine_generation_tokens_per_s")
        # 500 tokens over the time between the two scrapes, which is within the time around both.
        assert rate >= 500 / outer
        assert next(p.value for p in second if p.name == "engine_prompt_tokens_per_s") == 0.0

        engine.up = False
        with caplog.at_level(logging.WARNING, logger="modeldeck.metrics"):
            assert await scraper.scrape("big", url, translator) == []
            assert await scraper.scrape("big", url, translator) == []
        assert len([r for r in caplog.records if "metrics of big unavailable" in r.message]) == 1
    finally:
        await runner.cleanup()
