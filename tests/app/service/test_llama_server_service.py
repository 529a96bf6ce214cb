"""The whole supervisor lifecycle of the real llama-server (built by installers/test.sh from the pinned
llama-cpp-python sdist) on the bundled model, through the real service and the official `openai` client."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from app.client import ControlError
from app.hub.library import BUNDLED_ID
from app.installs.available import LLAMA_SERVER_ENV
from app.paths import AppPaths
from app.planner.defaults import DEFAULT_SLOTS
from tests.support.service import RunningService, StartService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

PARALLEL = 4


def stream_times(service: RunningService, index: int, times: list[tuple[float, float, int]]) -> None:
    """One streamed chat completion: when its first and last content chunks came, and how many there were."""
    client = service.openai_client()
    stream = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": f"Write a long story about robot number {index}."}],
        max_tokens=48, temperature=0.8, stream=True,
    )  # fmt: skip
    arrivals = [time.monotonic() for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    times.append((arrivals[0], arrivals[-1], len(arrivals)))


def test_parallel_streams_metrics_and_restart(llama_server_service: StartService) -> None:
    service = llama_server_service()
    started = service.start_on_llama_server(PARALLEL)
    assert started["engine"] == "llama-server" and started["plan"]["parallel"] == PARALLEL

    # Four streams at once: with four slots each one starts before any of them ends.
    times: list[tuple[float, float, int]] = []
    threads = [threading.Thread(target=stream_times, args=(service, i, times)) for i in range(PARALLEL)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(times) == PARALLEL, service.output()
    assert all(count > 4 for _, _, count in times)
    assert max(first for first, _, _ in times) < min(last for _, last, _ in times), times

    # llama-server's own /metrics, scraped and translated into our names.
    def generation_rate() -> float:
        series = service.client.series(120, names=["engine_generation_tokens_per_s"], model=BUNDLED_ID)["series"]
        return max(series[0]["v"], default=0.0) if series else 0.0

    assert wait_for(generation_rate, 15, "a generation rate from llama-server's /metrics") > 0
    running = service.client.series(120, names=["engine_requests_running"], model=BUNDLED_ID)["series"]
    assert running and max(running[0]["v"]) >= 1

    # Killed: the supervisor restarts it with the same plan, and the next request is served.
    pid = service.model()["pid"]
    os.kill(pid, signal.SIGKILL)
    restarted = wait_for(
        lambda: (m := service.model())["state"] == "ready" and m["restarts"] == 1 and m, 60, "the restart"
    )
    assert restarted["pid"] != pid and restarted["engine"] == "llama-server"
    assert restarted["plan"]["parallel"] == PARALLEL
    answer = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8
    )
    assert answer.choices[0].message.content


def test_asking_for_llama_server_where_none_is_built_is_refused_clearly(
    paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No configured path, no build in this MODELDECK_HOME, and a PATH without llama-server."""
    monkeypatch.delenv(LLAMA_SERVER_ENV, raising=False)
    monkeypatch.setenv("PATH", os.path.dirname(os.path.realpath("/bin/sh")))
    service = start_service_process(paths, tmp_path)
    try:
        with pytest.raises(ControlError) as refused:
            service.client.start_model(BUNDLED_ID, wait=True, overrides={"engine": "llama-server"})
        assert refused.value.status == 400
        assert "llama-server cannot run here" in str(refused.value)
        assert "modeldeck engines build llama-server" in str(refused.value)
        assert service.model()["state"] == "stopped"  # nothing was started, nothing lost
        # Without llama-server the default engine stays llama-cpp-python, one request at a time.
        started = service.client.start_model(BUNDLED_ID, wait=True)
        assert started["state"] == "ready" and started["engine"] == "llama-cpp-python"
        assert started["plan"]["parallel"] == 1
    finally:
        stop_service_process(service)


def test_llama_server_is_the_default_engine_where_it_is_built(llama_server_service: StartService) -> None:
    """A model started with no engine named runs on llama-server with DEFAULT_SLOTS slots, so that a chat and a
    script do not take turns in one prompt cache; naming llama-cpp-python still gets it."""
    service = llama_server_service("--model", BUNDLED_ID)
    model = service.model()
    assert model["state"] == "ready", service.client.logs(BUNDLED_ID)
    assert model["engine"] == "llama-server" and model["plan"]["parallel"] == DEFAULT_SLOTS
    reply = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert reply.choices[0].message.content
    assert service.model()["max_concurrent_requests"] == DEFAULT_SLOTS  # the gateway lets them through
    service.client.stop_model(BUNDLED_ID)
    started = service.client.start_model(BUNDLED_ID, wait=True, overrides={"engine": "llama-cpp-python"})
    assert started["state"] == "ready" and started["engine"] == "llama-cpp-python"
    assert started["plan"]["parallel"] == 1 and started["max_concurrent_requests"] == 1
