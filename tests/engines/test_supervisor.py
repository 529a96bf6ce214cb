"""The supervisor against real processes: the llama.cpp engine on the bundled model, and a tiny fault engine
(tests/engines/fault_engine.py) for failures the real engine cannot be made to show on demand."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import psutil
import pytest

from app.planner.defaults import default_plan
from engines.base import EngineCommand
from engines.gguf import read_gguf_info
from engines.llama_cpp import LlamaCppPythonEngine
from engines.states import EngineState, StateChange
from engines.supervisor import EngineSupervisor, SupervisorPolicy
from tests.support.waiting import wait_until

FAULT_ENGINE = Path(__file__).with_name("fault_engine.py")
FAST = SupervisorPolicy(ready_timeout_s=10, stop_grace_s=2, backoff_initial_s=0.05, backoff_max_s=0.2)


def fault_command(*flags: str) -> Callable[[int], EngineCommand]:
    def build(port: int) -> EngineCommand:
        return EngineCommand((sys.executable, str(FAULT_ENGINE), "--port", str(port), *flags))

    return build


class Recorder:
    def __init__(self) -> None:
        self.events: list[StateChange] = []

    def __call__(self, event: StateChange) -> None:
        self.events.append(event)

    def states(self) -> list[EngineState]:
        return [event.state for event in self.events]


def make(tmp_path: Path, factory: Callable[[int], EngineCommand], policy: SupervisorPolicy = FAST
         ) -> tuple[EngineSupervisor, Recorder]:  # fmt: skip
    recorder = Recorder()
    supervisor = EngineSupervisor(
        "test-model", factory, tmp_path / "logs" / "engine.log", tmp_path / "records", recorder, policy=policy
    )
    return supervisor, recorder


@pytest.fixture
async def llama(tmp_path: Path, bundled_gguf: Path) -> AsyncIterator[tuple[EngineSupervisor, Recorder]]:
    plan = default_plan("smollm2", read_gguf_info(bundled_gguf))
    engine = LlamaCppPythonEngine()
    supervisor, recorder = make(tmp_path, lambda port: engine.build_command(plan, port, "secret-key-123"))
    yield supervisor, recorder
    await supervisor.stop()


async def complete(base_url: str, key: str) -> dict[str, object]:
    async with aiohttp.ClientSession() as session:
        request = {"prompt": "The capital of France is", "max_tokens": 8}
        headers = {"Authorization": f"Bearer {key}"}
        async with session.post(f"{base_url}/v1/completions", json=request, headers=headers) as response:
            assert response.status == 200
            result: dict[str, object] = await response.json()
            return result


async def test_llama_engine_ready_restarted_after_sigkill(llama: tuple[EngineSupervisor, Recorder]) -> None:
    supervisor, recorder = llama
    assert await supervisor.start() == EngineState.READY
    assert supervisor.base_url is not None
    assert (await complete(supervisor.base_url, "secret-key-123"))["choices"]
    first_pid = supervisor.pid
    assert first_pid is not None
    os.kill(first_pid, signal.SIGKILL)
    await wait_until(lambda: supervisor.state == EngineState.READY and supervisor.pid not in (None, first_pid), "ready")
    assert EngineState.RESTARTING in recorder.states()
    assert supervisor.restarts == 1
    assert (await complete(supervisor.base_url, "secret-key-123"))["choices"]
    # the internal key never reaches the log
    assert all("secret-key-123" not in line for line in supervisor.log.tail())
    assert "secret-key-123" not in supervisor.log.path.read_text()


async def test_start_and_stop_are_safe_twice(llama: tuple[EngineSupervisor, Recorder]) -> None:
    supervisor, recorder = llama
    first, second = await asyncio.gather(supervisor.start(), supervisor.start())
    assert first == second == EngineState.READY
    assert recorder.states().count(EngineState.STARTING) == 1
    pid = supervisor.pid
    await supervisor.stop()
    await supervisor.stop()
    assert supervisor.state == EngineState.STOPPED
    assert not psutil.pid_exists(pid or 0) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert recorder.states()[-2:] == [EngineState.STOPPING, EngineState.STOPPED]


async def test_clean_exit_is_restarted_too(tmp_path: Path) -> None:
    supervisor, recorder = make(tmp_path, fault_command("--exit-after", "0.3", "--exit-code", "0"))
    try:
        assert await supervisor.start() == EngineState.READY
        await wait_until(lambda: supervisor.restarts >= 1 and supervisor.state == EngineState.READY, "a restart")
        restart = next(e for e in recorder.events if e.state == EngineState.RESTARTING and "code 0" in e.message)
        assert "exiting (injected)" in restart.message
    finally:
        await supervisor.stop()


async def test_gives_up_after_repeated_failures(tmp_path: Path) -> None:
    policy = SupervisorPolicy(max_failures=3, failure_window_s=60, backoff_initial_s=0.05, stop_grace_s=1)
    supervisor, recorder = make(tmp_path, fault_command("--exit-after", "0.1", "--exit-code", "3"), policy)
    try:
        await supervisor.start()
        await wait_until(lambda: supervisor.state == EngineState.FAILED, "failed")
        assert "gave up after 3 failures" in supervisor.message
        assert supervisor.restarts == 2
        assert recorder.states().count(EngineState.RESTARTING) >= 2
    finally:
        await supervisor.stop()


async def test_early_exit_reports_code_and_last_lines(tmp_path: Path) -> None:
    supervisor, _ = make(tmp_path, fault_command("--fail-start", "7"))
    assert await supervisor.start() == EngineState.FAILED
    assert "exited with code 7 during start-up" in supervisor.message
    assert "fatal: cannot load the model (injected)" in supervisor.message
    assert supervisor.restarts == 0
    await supervisor.stop()


async def test_missing_program_fails_clearly(tmp_path: Path) -> None:
    supervisor, _ = make(tmp_path, lambda port: EngineCommand(("/nonexistent/engine-binary", str(port))))
    assert await supervisor.start() == EngineState.FAILED
    assert "/nonexistent/engine-binary" in supervisor.message
    await supervisor.stop()


async def test_loading_progress_pushes_the_deadline_back(tmp_path: Path) -> None:
    policy = SupervisorPolicy(ready_timeout_s=1.0, stop_grace_s=1)
    supervisor, _ = make(tmp_path, fault_command("--load-seconds", "2.5", "--progress"), policy)
    try:
        assert await supervisor.start() == EngineState.READY
    finally:
        await supervisor.stop()


async def test_silent_slow_start_times_out(tmp_path: Path) -> None:
    policy = SupervisorPolicy(ready_timeout_s=1.0, stop_grace_s=1)
    supervisor, _ = make(tmp_path, fault_command("--load-seconds", "30"), policy)
    started = time.monotonic()
    assert await supervisor.start() == EngineState.FAILED
    assert time.monotonic() - started < 10
    assert "not ready after 1 s without progress" in supervisor.message
    assert supervisor.pid is None
    await supervisor.stop()


async def test_stop_kills_engine_ignoring_sigterm_and_its_children(tmp_path: Path) -> None:
    policy = SupervisorPolicy(stop_grace_s=0.5)
    supervisor, _ = make(tmp_path, fault_command("--ignore-term", "--grandchild"), policy)
    assert await supervisor.start() == EngineState.READY
    engine = psutil.Process(supervisor.pid)
    children = engine.children(recursive=True)
    assert len(children) == 2  # its grandchild, and the exec wrapper's watcher (engines/_exec_wrapper.py)
    started = time.monotonic()
    await supervisor.stop()
    assert time.monotonic() - started < 5
    _gone, alive = psutil.wait_procs([engine, *children], timeout=5)
    assert not alive
    assert supervisor.state == EngineState.STOPPED
    assert not list((tmp_path / "records").glob("*.json")), "the engine record outlived the engine"


async def test_files_of_the_command_are_private_while_it_runs_and_gone_after(tmp_path: Path) -> None:
    options = tmp_path / "run" / "options.yaml"

    def build(port: int) -> EngineCommand:
        command = fault_command()(port)
        return EngineCommand(command.argv, files={options: "enable_iter_perf_stats: true\n"})

    supervisor, _ = make(tmp_path, build)
    assert await supervisor.start() == EngineState.READY
    assert options.read_text(encoding="utf-8") == "enable_iter_perf_stats: true\n"
    assert options.stat().st_mode & 0o777 == 0o600 and options.parent.stat().st_mode & 0o777 == 0o700
    await supervisor.stop()
    assert not options.exists()


async def test_a_file_that_cannot_be_written_fails_the_start_clearly(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("", encoding="utf-8")

    def build(port: int) -> EngineCommand:
        return EngineCommand(fault_command()(port).argv, files={blocker / "options.yaml": "x: 1\n"})

    supervisor, _ = make(tmp_path, build)
    assert await supervisor.start() == EngineState.FAILED
    assert f"could not write {blocker}" in supervisor.message
    assert supervisor.pid is None
    await supervisor.stop()


async def test_an_engine_that_cannot_be_recorded_is_stopped_and_the_start_fails(tmp_path: Path) -> None:
    """The record lets a later service stop an engine this one left behind; without it (a full disk, here a file
    where its folder should be) the engine must not run."""
    (tmp_path / "records").write_text("", encoding="utf-8")
    supervisor, _ = make(tmp_path, fault_command())
    assert await asyncio.wait_for(supervisor.start(), 30) == EngineState.FAILED
    assert f"could not record {sys.executable} in {tmp_path / 'records'}" in supervisor.message
    assert supervisor.pid is None
    await supervisor.stop()
