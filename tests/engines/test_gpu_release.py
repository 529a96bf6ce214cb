"""A stop waits until the engine's GPU memory is free. There is no GPU here, so the probe is injected: a stand-in
for NVML's per-process reading that reports memory held while a watched process still exists (what the driver
shows until it has torn the process's context down). The engine processes themselves are real."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from engines.base import EngineCommand
from engines.gpu_release import wait_gpu_released
from engines.supervisor import EngineSupervisor, SupervisorPolicy

FAULT_ENGINE = Path(__file__).with_name("fault_engine.py")
GIB = 1 << 30


def readings(*values: int | None) -> tuple[Callable[[set[int]], int | None], list[set[int]]]:
    calls: list[set[int]] = []
    remaining = list(values)

    def probe(pids: set[int]) -> int | None:
        calls.append(set(pids))
        return remaining.pop(0) if len(remaining) > 1 else remaining[0]

    return probe, calls


async def test_waits_until_the_memory_is_released() -> None:
    probe, calls = readings(2 * GIB, GIB, 0)
    release = await wait_gpu_released({10, 11}, probe, timeout_s=5, poll_s=0.01)
    assert (release.known, release.released, release.held_bytes) == (True, True, 0)
    assert calls == [{10, 11}] * 3
    assert release.text().startswith("GPU memory released after")


async def test_gives_up_after_the_timeout_saying_what_is_still_held() -> None:
    probe, _ = readings(3 * GIB)
    release = await wait_gpu_released({10}, probe, timeout_s=0.1, poll_s=0.02)
    assert (release.known, release.released, release.held_bytes) == (True, False, 3 * GIB)
    assert release.waited_s >= 0.1
    assert "3072 MiB" in release.text()


@pytest.mark.parametrize("probe", [None, lambda pids: None])
async def test_without_a_gpu_it_returns_at_once(probe: Callable[[set[int]], int | None] | None) -> None:
    release = await wait_gpu_released({10}, probe, timeout_s=30)
    assert release.known is False and release.released and release.waited_s < 1.0


async def test_supervisor_stop_waits_for_every_process_of_the_engine(tmp_path: Path) -> None:
    seen: list[set[int]] = []

    def driver(pids: set[int]) -> int | None:
        seen.append(set(pids))
        alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
        return GIB * len(alive)

    def command(port: int) -> EngineCommand:
        return EngineCommand((sys.executable, str(FAULT_ENGINE), "--port", str(port), "--grandchild"))

    policy = SupervisorPolicy(ready_timeout_s=10, stop_grace_s=2, gpu_release_timeout_s=10, gpu_release_poll_s=0.05)
    supervisor = EngineSupervisor(
        "gpu-model", command, tmp_path / "engine.log", tmp_path / "records", policy=policy, gpu_memory_probe=driver
    )
    await supervisor.start()
    engine_pid = supervisor.pid
    assert engine_pid is not None
    family = {engine_pid, *(child.pid for child in psutil.Process(engine_pid).children(recursive=True))}
    assert len(family) >= 2  # the engine and its grandchild
    await supervisor.stop()
    assert supervisor.gpu_release is not None and supervisor.gpu_release.released
    assert seen and seen[0] == family  # the grandchild's memory counts too
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in family)


async def test_a_restart_waits_until_the_crashed_engine_released_its_memory(tmp_path: Path) -> None:
    """A ready engine that exits while a child of its own still runs (vLLM's API server and its workers)."""
    seen: list[set[int]] = []

    def driver(pids: set[int]) -> int | None:
        seen.append(set(pids))
        return GIB * sum(1 for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie")

    def command(port: int) -> EngineCommand:
        argv = (sys.executable, str(FAULT_ENGINE), "--port", str(port), "--grandchild", "--exit-after", "0.3")
        return EngineCommand(argv)

    policy = SupervisorPolicy(
        ready_timeout_s=10, stop_grace_s=2, backoff_initial_s=0.05, gpu_release_timeout_s=10, gpu_release_poll_s=0.05
    )
    supervisor = EngineSupervisor(
        "gpu-model", command, tmp_path / "engine.log", tmp_path / "records", policy=policy, gpu_memory_probe=driver
    )
    await supervisor.start()
    first = supervisor.pid
    assert first is not None
    family = {first, *(child.pid for child in psutil.Process(first).children(recursive=True))}
    for _ in range(200):  # until it has crashed and been started again
        if supervisor.restarts and supervisor.pid not in (None, first):
            break
        await asyncio.sleep(0.05)
    restarted = supervisor.restarts >= 1
    await supervisor.stop()
    # Noticed although its grandchild kept the output pipe open, and the grandchild was stopped with it.
    assert restarted
    assert family in seen  # the crashed engine and its grandchild were watched before the restart
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie" for pid in family)
