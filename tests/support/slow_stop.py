"""A service that is slow to stop: the state a command or a second service meets in the seconds after a stop."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.hub_server import FakeHub, add_repo
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for


@contextmanager
def service_slow_to_stop(
    hub: FakeHub, gguf_slice: bytes, paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningService]:
    """A service on the bundled model, sent SIGTERM while a download hangs on a stalled Hub and its engine is
    suspended: it holds the data folder until the download has paused and the engine has stopped (up to 5 s each), and
    answers no more meanwhile. It is stopped, if it has not yet, when the block ends."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    add_repo(hub, "org/smol-GGUF", {"smol-Q4_1.gguf": gguf_slice})
    hub.faults.stall_after = 1_000_000
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    try:
        job = service.client.start_download("org/smol-GGUF", "Q4_1")["id"]
        wait_for(lambda: next(d for d in service.client.downloads() if d["id"] == job)["done"] > 0, 30, "the download")
        psutil.Process(service.model()["pid"]).suspend()  # a stopped engine acts on SIGTERM only once it is killed
        service.process.terminate()
        yield service
    finally:
        stop_service_process(service)
