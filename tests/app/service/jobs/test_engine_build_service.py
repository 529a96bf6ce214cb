"""Engine builds through the control API (the wizard's "Build llama-server"), on the real service: a real cmake build of
the tiny llama-server project of tests/app/installs/test_llama_server_build.py, packed as llama-cpp-python's sdist and
named by $MODELDECK_LLAMA_SERVER_SDIST (the route builds from it instead of downloading the pinned sdist).
Progress as `engine_build` events, one build at a time, the new engine seen by the next recommendation, a cancel
that leaves no process, bad requests refused with a reason."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.api_types import EngineBuildListing, EngineBuildRecord
from app.client import ControlClient, ControlError
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.service.jobs.engine_builds import SDIST_ENV
from engines.llama_server import installed_builds
from tests.app.installs.test_llama_server_build import sdist_of, tiny_project
from tests.app.test_api_types import assert_event_fits, assert_fits
from tests.support.events import EventRecorder
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

BUILD_TIMEOUT_S = 300.0  # the tiny project builds in seconds; a busy 2-core machine is slower
SLOW_STEP = "add_custom_target(slow COMMAND ${CMAKE_COMMAND} -E sleep 120)\nadd_dependencies(llama-server slow)\n"


def build_service(paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: str = "") -> RunningService:
    sdist = sdist_of(tiny_project(tmp_path / "project", extra=extra), tmp_path)
    monkeypatch.setenv(SDIST_ENV, str(sdist))
    return start_service_process(paths, tmp_path)


@pytest.fixture
def service(paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningService]:
    running = build_service(paths, tmp_path, monkeypatch)
    yield running
    stop_service_process(running)


@pytest.fixture
def slow_service(paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningService]:
    """Its build waits on a 120 s step that prints nothing (a long compile): it is cancelled long before."""
    running = build_service(paths, tmp_path, monkeypatch, SLOW_STEP)
    yield running
    stop_service_process(running)


def _listed_engine(client: ControlClient) -> str:
    return next(str(m["engine"]) for m in client.models() if m["id"] == BUNDLED_ID)


def finished(client: ControlClient) -> dict[str, Any]:
    build = wait_for(lambda: (b := client.engine_builds()["build"]) and b["state"] != "running" and b,
                     BUILD_TIMEOUT_S, "the build's end")  # fmt: skip
    assert_fits(build, EngineBuildRecord, "GET /api/engines/builds")
    return dict(build)


def test_a_build_publishes_progress_and_the_next_recommendation_uses_it(
    service: RunningService, paths: AppPaths
) -> None:
    client = service.client
    assert client.engine_builds() == {"build": None}
    assert_fits(client.engine_builds(), EngineBuildListing)
    # Asked before the build: the service detects llama-server missing and keeps that answer for minutes.
    assert not client.about()["engines"]["llama-server"]["installed"]
    assert _listed_engine(client) == "llama-cpp-python"
    assert client.recommend(BUNDLED_ID, "serve", 3)["best"]["engine"] == "llama-cpp-python"  # type: ignore[index]
    events = EventRecorder(client, "engine_build")
    try:
        assert events.opened.wait(30)
        started = client.start_engine_build("llama-server")
        assert (started["state"], started["engine"]) == ("running", "llama-server")
        assert_fits(started, EngineBuildRecord, "POST /api/engines/llama-server/build")
        with pytest.raises(ControlError) as busy:
            client.start_engine_build("llama-server")
        assert busy.value.status == 409 and "already going" in str(busy.value)
        build = finished(client)
        wait_for(
            lambda: events.values("build") and events.values("build")[-1]["state"] != "running", 30, "the last event"
        )
    finally:
        events.close()
    assert build["state"] == "completed", build
    assert build["percent"] == 100 and build["error"] is None and build["version"] == "9.9.9"
    executable = Path(build["executable"])
    assert [b.executable for b in installed_builds(paths.engine_builds)] == [executable]
    assert build["log_path"] and "Building C object" in Path(build["log_path"]).read_text()
    # Progress: the steps in order, the percent rising to 100, the last event the completed build.
    percents = [b["percent"] for b in events.values("build")]
    assert percents == sorted(percents) and percents[-1] == 100
    steps = [b["step"] for b in events.values("build")]
    assert steps.index("configuring") < steps.index("compiling") < len(steps) - 1
    assert events.values("build")[-1] == build
    for event in events.events:
        assert_event_fits(event)
    # The advisor's engine detections were refreshed: the new llama-server is seen at once, and recommended.
    engine = client.about()["engines"]["llama-server"]
    assert engine["installed"] and engine["version"] == "tiny-1 (test)"
    assert client.recommend(BUNDLED_ID, "serve", 3)["best"]["engine"] == "llama-server"  # type: ignore[index]
    # The engine manager detects again too: a model not started yet is listed with the engine a start would choose.
    wait_for(lambda: _listed_engine(client) == "llama-server", 30, "the model listed on the new llama-server")


def service_children(service: RunningService) -> list[str]:
    names = []
    for child in psutil.Process(service.process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a step that just ended may be gone
            names.append(" ".join(child.cmdline()))
    return names


def test_cancel_stops_cmake_and_leaves_no_process(slow_service: RunningService, paths: AppPaths) -> None:
    client = slow_service.client
    with pytest.raises(ControlError) as nothing:
        client.cancel_engine_build()
    assert nothing.value.status == 409
    client.start_engine_build()
    wait_for(lambda: any("sleep" in name for name in service_children(slow_service)), BUILD_TIMEOUT_S,
             "the slow build step")  # fmt: skip
    cancelled = client.cancel_engine_build()
    assert cancelled["state"] == "cancelled" and cancelled["finished"] is not None
    assert_fits(cancelled, EngineBuildRecord, "POST /api/engines/llama-server/build/cancel")
    assert service_children(slow_service) == [], "cmake, make and the step went with the cancel"
    assert installed_builds(paths.engine_builds) == [] and not list(paths.engine_builds.glob(".build-*"))
    assert client.engine_builds()["build"] == cancelled
    with pytest.raises(ControlError) as again:
        client.cancel_engine_build()
    assert again.value.status == 409


def test_stopping_the_service_stops_its_build(paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cmake runs in a session of its own: were the service to exit without stopping it, it would live on, adopted
    by init, out of the reach of the test's own check for leftover children."""
    running = build_service(paths, tmp_path, monkeypatch, SLOW_STEP)
    try:
        running.client.start_engine_build()
        wait_for(lambda: any("sleep" in name for name in service_children(running)), BUILD_TIMEOUT_S,
                 "the slow build step")  # fmt: skip
        builders = psutil.Process(running.process.pid).children(recursive=True)
    finally:
        stop_service_process(running)
    _, alive = psutil.wait_procs(builders, timeout=10)
    assert not alive, [p.pid for p in alive]
    assert running.process.returncode == 0, running.output()[-2000:]
    assert installed_builds(paths.engine_builds) == []


def test_bad_build_requests_get_a_clear_error(paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SDIST_ENV, str(tmp_path / "no-such-sdist.tar.gz"))
    running = start_service_process(paths, tmp_path)
    try:
        client = running.client
        for path, status, words in [
            ("/api/engines/vllm/build", 404, "builds llama-server"),
            ("/api/engines/llama-server/rebuild", 404, "Unknown route"),
        ]:
            with pytest.raises(ControlError) as refused:
                client._call("POST", path)
            assert refused.value.status == status and words in str(refused.value), path
        client.start_engine_build()
        build = finished(client)
        assert build["state"] == "failed" and "no-such-sdist.tar.gz, which is not a file" in build["error"]
        assert build["log_path"] is None and installed_builds(paths.engine_builds) == []
        # A failed build does not block the next one.
        assert client.start_engine_build()["state"] == "running"
        assert finished(client)["state"] == "failed"
    finally:
        stop_service_process(running)
