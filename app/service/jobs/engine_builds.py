"""Engine builds the service does for its clients (the wizard's "Build llama-server"), one at a time.

The build is app.installs.llama_server_build's plain function, as `modeldeck engines build llama-server` runs it,
on a worker thread with a TaskState: its progress becomes `engine_build` events (a few a second, every change of
step or state at once), and a cancel kills cmake's process group before the call returns.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from app.api_types import BuildState, EngineBuildRecord
from app.installs.llama_server_build import (
    PINNED_VERSION,
    BuildError,
    BuildResult,
    build_llama_server,
    detect_backend,
    forget_cuda_toolkit,
)
from app.installs.sdist_download import download_sdist, sdist_path
from app.service.events import EventBus
from app.task import Progress, Stopped, TaskState
from engines.llama_server import EXECUTABLE

log = logging.getLogger("modeldeck.builds")

# A llama-cpp-python sdist to build from instead of downloading the pinned one with pip: for a machine without
# access to PyPI, and for the tests, which point it at a tiny cmake project.
SDIST_ENV = "MODELDECK_LLAMA_SERVER_SDIST"
BUILDABLE = ("llama-server",)
PROGRESS_INTERVAL_S = 0.25  # as downloads: a few events a second
ERROR_CHARS = 2000


class BuildConflict(Exception):
    """A build is already going (or none is, for a cancel)."""


class UnknownBuildTarget(Exception):
    """The service cannot build that engine."""


@dataclass
class EngineBuild:
    """One build and where it stands."""

    id: str
    engine: str
    state: BuildState = "running"
    percent: int = 0
    step: str = "starting"
    error: str | None = None
    log_path: str | None = None
    executable: str | None = None
    version: str | None = None
    backend: str | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None

    def to_dict(self) -> EngineBuildRecord:
        return {
            "id": self.id, "engine": self.engine, "state": self.state, "percent": self.percent, "step": self.step,
            "error": self.error, "log_path": self.log_path, "executable": self.executable, "version": self.version,
            "backend": self.backend, "started": self.started, "finished": self.finished,
        }  # fmt: skip


class _StepState(TaskState):
    """A TaskState that also says when the build moves to another step: configuring reports no percent, and the
    user should see that it moved on from unpacking."""

    def __init__(self, on_progress: Callable[[Progress], None], on_step: Callable[[str], None]) -> None:
        super().__init__(on_progress, interval_s=PROGRESS_INTERVAL_S)
        self._on_step = on_step

    def working_on(self, current: str) -> None:
        super().working_on(current)
        self._on_step(current)


class EngineBuilds:
    """The engine builds of this service: at most one running; `on_built` runs (on the event loop) after a
    success, so that whatever caches installations sees the new engine."""

    def __init__(self, bus: EventBus, dest: Path, sdists: Path, on_built: Callable[[], None]) -> None:
        self._bus = bus
        self._dest = dest
        self._sdists = sdists
        self._on_built = on_built
        self._ids = itertools.count(1)
        self._build: EngineBuild | None = None
        self._state: TaskState | None = None
        self._task: asyncio.Task[None] | None = None
        # One thread of its own: a build runs for minutes and must not hold a worker of the loop's default pool.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-build")

    @property
    def current(self) -> EngineBuild | None:
        return self._build

    async def start(self, engine: str) -> EngineBuild:
        if engine not in BUILDABLE:
            raise UnknownBuildTarget(f"The service builds {', '.join(BUILDABLE)}; not {engine!r}.")
        if self._build is not None and self._build.state == "running":
            raise BuildConflict(f"A build of {self._build.engine} is already going; cancel it first.")
        loop = asyncio.get_running_loop()
        build = EngineBuild(f"build-{next(self._ids)}", engine)

        def progress(report: Progress) -> None:  # on the worker thread
            loop.call_soon_threadsafe(self._on_progress, build, report)

        def step(current: str) -> None:  # on the worker thread
            loop.call_soon_threadsafe(self._on_step, build, current)

        self._build, self._state = build, _StepState(progress, step)
        self._task = asyncio.create_task(self._run(build, self._state))
        self._publish(build)
        log.info("build %s of %s started", build.id, engine)
        return build

    async def cancel(self) -> EngineBuild:
        build, state, task = self._build, self._state, self._task
        if build is None or build.state != "running" or state is None or task is None:
            raise BuildConflict("No engine build is going.")
        state.cancel()
        # The build function kills cmake's process group before it raises Stopped: once the task is done, no
        # compiler is left.
        await task
        return build

    async def stop(self) -> None:
        """At shutdown: cancel a running build and wait for its processes to go."""
        if self._build is not None and self._build.state == "running":
            await self.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self, build: EngineBuild, state: TaskState) -> None:
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._executor, self._work, build, state)
        except Stopped:
            build.state = "cancelled"
        except BuildError as exc:
            build.state, build.error = "failed", str(exc)[-ERROR_CHARS:]
        except Exception as exc:  # a worker's failure has no other way to reach the user than the build's state
            log.exception("build %s failed", build.id)
            build.state, build.error = "failed", f"unexpected error ({type(exc).__name__}): {exc}"
        else:
            build.state, build.percent, build.step = "completed", 100, "done"
            build.executable, build.version, build.backend = str(result.executable), result.version, result.backend
            self._on_built()
        build.finished = time.time()
        self._publish(build)
        log.info("build %s %s", build.id, build.state)

    def _work(self, build: EngineBuild, state: TaskState) -> BuildResult:
        """On the worker thread: the sources (the configured sdist, else the pinned one, downloaded once), then the
        build (the CUDA toolkit asked afresh: it may have changed since the service's last build)."""
        forget_cuda_toolkit()
        backend = detect_backend()[0]
        configured = os.environ.get(SDIST_ENV)
        if configured:
            source = Path(configured).expanduser()
            if not source.is_file():
                raise BuildError(f"${SDIST_ENV} names {source}, which is not a file")
        else:
            if not sdist_path(self._sdists, PINNED_VERSION).is_file():
                state.working_on(f"downloading llama_cpp_python=={PINNED_VERSION}'s sources")
            source = download_sdist(self._sdists, PINNED_VERSION, state)
        state.check()
        build.backend = backend
        # Where the build function writes cmake's output (it names the file after the source and the backend).
        log_path = self._dest / f"{EXECUTABLE}-{source.name.removesuffix('.tar.gz')}-{backend}.log"
        build.log_path = str(log_path)
        try:
            return build_llama_server(source, self._dest, state, backend=backend)
        finally:
            if not log_path.is_file():
                build.log_path = None  # it stopped before cmake wrote anything

    def _on_progress(self, build: EngineBuild, report: Progress) -> None:
        if build.state != "running":
            return  # a late report of a build already ended
        build.percent = min(100, max(0, report.done))
        build.step = report.current or build.step
        self._publish(build)

    def _on_step(self, build: EngineBuild, current: str) -> None:
        if build.state != "running":
            return
        build.step = current
        self._publish(build)

    def _publish(self, build: EngineBuild) -> None:
        self._bus.publish({"type": "engine_build", "build": build.to_dict()})


__all__ = ["BUILDABLE", "SDIST_ENV", "BuildConflict", "EngineBuild", "EngineBuilds", "UnknownBuildTarget"]
