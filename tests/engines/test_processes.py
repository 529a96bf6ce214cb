"""Process plumbing with real processes: no engine outlives its service, and leftovers are found safely."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path

import psutil

from engines.processes import (
    EngineRecord,
    free_loopback_port,
    reap_leftover_engines,
    spawn_engine,
    write_record,
)

FAULT_ENGINE = Path(__file__).with_name("fault_engine.py")


def fault_argv() -> tuple[str, ...]:
    return (sys.executable, str(FAULT_ENGINE), "--port", str(free_loopback_port()))


async def test_recorded_leftover_engine_is_stopped(tmp_path: Path) -> None:
    process, record = await spawn_engine(fault_argv(), {"MODELDECK_MODEL_ID": "m"}, uuid.uuid4().hex)
    assert record is not None
    write_record(tmp_path, record)
    stopped = reap_leftover_engines(tmp_path, grace_s=2)
    assert [r.pid for r in stopped] == [process.pid]
    assert await process.wait() is not None
    assert not list(tmp_path.glob("*.json"))


async def test_reused_pid_or_foreign_marker_is_left_alone(tmp_path: Path) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        real = EngineRecord(bystander.pid, psutil.Process(bystander.pid).create_time(), "marker", "m")
        write_record(tmp_path, replace(real, marker="not-its-marker"))
        write_record(tmp_path, replace(real, marker="old-create-time", create_time=real.create_time - 100))
        (tmp_path / "garbage.json").write_text("{not json")
        assert reap_leftover_engines(tmp_path, grace_s=1) == []
        assert bystander.poll() is None, "a process that is not our engine was stopped"
        assert not list(tmp_path.glob("*.json"))
    finally:
        bystander.kill()
        bystander.wait()


def test_engine_dies_with_its_parent_even_on_sigkill(tmp_path: Path) -> None:
    """A stand-in service process starts an engine through the exec wrapper, then is SIGKILLed."""
    parent_script = textwrap.dedent(f"""
        import asyncio, sys, time
        from engines.processes import spawn_engine
        async def main():
            process, _ = await spawn_engine({fault_argv()!r}, {{}}, "marker")
            print(process.pid, flush=True)
            await asyncio.sleep(600)
        asyncio.run(main())
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    engine = psutil.Process(int(parent.stdout.readline()))
    time.sleep(0.5)  # the wrapper has exec'd the engine by now
    assert engine.is_running()
    assert "fault_engine.py" in " ".join(engine.cmdline())
    parent.kill()
    parent.wait()
    parent.stdout.close()
    _gone, alive = psutil.wait_procs([engine], timeout=5)
    assert not alive, "the engine outlived its SIGKILLed parent"
