"""Process plumbing with real processes: no engine outlives its service, and leftovers are found safely."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from engines.processes import (
    MARKER_ENV,
    EngineRecord,
    free_loopback_port,
    reap_leftover_engines,
    spawn_engine,
    stop_process_tree,
    write_record,
)
from tests.support.waiting import wait_for

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
    wait_for(lambda: "fault_engine.py" in " ".join(engine.cmdline()), 30, "the wrapper to exec the engine")
    assert engine.is_running()
    parent.kill()
    parent.wait()
    parent.stdout.close()
    _gone, alive = psutil.wait_procs([engine], timeout=5)
    assert not alive, "the engine outlived its SIGKILLed parent"


async def test_engine_inherits_only_the_allowed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's secrets stay in the service; what engines need to run (paths, locale, GPU and thread
    settings) and what the adapter sets for its command reach the engine."""
    secrets = {
        "MODELDECK_API_KEY": "sk-gateway", "MODELDECK_REMOTE_KEY_GPUBOX": "sk-remote", "HF_TOKEN": "hf_secret",
        "HUGGING_FACE_HUB_TOKEN": "hf_old", "VLLM_API_KEY": "sk-user-vllm", "AWS_SECRET_ACCESS_KEY": "aws",
        "OPENAI_API_KEY": "sk-openai", "PYTHONPATH": "/somewhere/else",
    }  # fmt: skip
    needed = {
        "CUDA_VISIBLE_DEVICES": "1", "OMP_NUM_THREADS": "2", "GGML_CUDA_NO_PINNED": "1", "LC_ALL": "C.UTF-8",
        "NVIDIA_VISIBLE_DEVICES": "all", "HF_HOME": "/models/hf", "TMPDIR": "/tmp",
    }  # fmt: skip
    for name, value in {**secrets, **needed}.items():
        monkeypatch.setenv(name, value)
    process, record = await spawn_engine(fault_argv(), {"LLAMA_API_KEY": "internal", "MODELDECK_MODEL_ID": "m"}, "mk")
    try:
        assert record is not None
        environment = wait_for_environment(process.pid)
    finally:
        await stop_process_tree(process, 2)
    assert not secrets.keys() & environment.keys(), sorted(secrets.keys() & environment.keys())
    assert {name: environment.get(name) for name in needed} == needed
    assert environment["PATH"] == os.environ["PATH"] and environment["HOME"] == os.environ["HOME"]
    assert environment["LLAMA_API_KEY"] == "internal"  # the adapter's own setting for its command


def wait_for_environment(pid: int) -> dict[str, str]:
    """The engine's environment once the wrapper has exec'd it (before that it is the wrapper's, the same)."""
    deadline = time.monotonic() + 30
    while True:
        engine = psutil.Process(pid)
        if "fault_engine.py" in " ".join(engine.cmdline()) or time.monotonic() > deadline:
            return engine.environ()
        time.sleep(0.05)


def test_engine_children_die_with_the_sigkilled_parent_too() -> None:
    """The parent-death signal reaches the engine only: its own children (vLLM's workers) would outlive the
    SIGKILLed service. The wrapper's watcher kills the engine's whole process group when the lifeline closes."""
    parent_script = textwrap.dedent(f"""
        import asyncio
        from engines.processes import spawn_engine
        async def main():
            process, _ = await spawn_engine({(*fault_argv(), "--grandchild")!r}, {{}}, "marker")
            async for line in process.stdout:
                if line.startswith(b"grandchild pid"):
                    print(process.pid, int(line.split()[-1]), flush=True)
            await asyncio.sleep(600)
        asyncio.run(main())
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    engine_pid, grandchild_pid = map(int, parent.stdout.readline().split())
    family = [psutil.Process(engine_pid), psutil.Process(grandchild_pid)]
    parent.kill()
    parent.wait()
    parent.stdout.close()
    _gone, alive = psutil.wait_procs(family, timeout=10)
    for survivor in alive:
        survivor.kill()
    assert not alive, f"outlived their SIGKILLed parent: {alive}"


def test_fifty_sigkilled_parents_leave_no_engine_behind() -> None:
    """Fifty stand-in services (the service's own spawn path, `spawn_engine`, in a small process: starting the
    real service fifty times would take minutes) each start an engine and are SIGKILLed at a different moment:
    before, while and after the wrapper sets up. No engine, no engine's child and no watcher may survive.
    Ten run at a time; the kill moment steps through 0-0.5 s."""
    marker_prefix = f"loop-{uuid.uuid4().hex[:8]}-"
    parent_script = textwrap.dedent("""
        import asyncio, sys
        from engines.processes import spawn_engine
        async def main():
            process, _ = await spawn_engine(tuple(sys.argv[2:]), {}, sys.argv[1])
            print(process.pid, flush=True)
            await asyncio.sleep(600)
        asyncio.run(main())
    """)
    for round_ in range(5):
        parents = []
        for index in range(10):
            marker = f"{marker_prefix}{round_}-{index}"
            parents.append(subprocess.Popen(
                [sys.executable, "-c", parent_script, marker, *fault_argv(), "--grandchild"],
                stdout=subprocess.PIPE, text=True,
            ))  # fmt: skip
        for index, parent in enumerate(parents):
            assert parent.stdout is not None
            assert parent.stdout.readline().strip().isdigit()  # spawn_engine has returned: the engine is starting
            time.sleep(index * 0.05)  # staggers the kill moment, nothing waits on it
            parent.kill()
        for parent in parents:
            parent.wait()
            assert parent.stdout is not None
            parent.stdout.close()

    def survivors() -> list[int]:
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if process.environ().get(MARKER_ENV, "").startswith(marker_prefix):  # children inherit it
                    found.append(process.pid)
        return found

    deadline = time.monotonic() + 20
    while (left := survivors()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    assert left == [], "engines (or their children) outlived their SIGKILLed parents"
