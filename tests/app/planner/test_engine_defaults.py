"""The engine defaults the planner chooses: OpenMP threads spin only where the cores are free of other work
(measured by tests/bench/engine_defaults.py: spinning doubles decode on an idle machine and collapses on a busy
one), one thread per physical core, and the wait policy reaching both llama.cpp engines' environment."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from app.planner.defaults import (
    DEFAULT_CONTEXT,
    DEFAULT_SLOTS,
    busy_cores,
    default_plan,
    logical_cores,
    physical_cores,
    spin_wait_fits,
)
from engines.base import SPIN_COUNT
from engines.gguf import read_gguf_info
from engines.llama_cpp import LlamaCppPythonEngine
from engines.llama_server import LlamaServerEngine


def test_threads_spin_only_where_each_finds_a_free_core() -> None:
    cores = logical_cores()
    assert spin_wait_fits(1, busy=cores - 1.5)
    assert spin_wait_fits(1, busy=cores - 0.5)  # half a core of background work is tolerated
    assert not spin_wait_fits(1, busy=cores - 0.4)
    assert not spin_wait_fits(cores, busy=1.0)  # one busy core: a peer of the engine's would wait for it


def test_without_a_figure_given_the_plan_samples_the_machine_now(
    bundled_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the CPU does now decides, not the load average (which still counts work that has just ended)."""
    info = read_gguf_info(bundled_gguf)
    monkeypatch.setattr(psutil, "getloadavg", lambda: (logical_cores() + 1.0,) * 3)  # busy a minute ago
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None, percpu=False: 0.0)
    assert default_plan("m", info).spin_wait is (physical_cores() <= logical_cores())
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None, percpu=False: 100.0)
    assert default_plan("m", info).spin_wait is False


def test_work_spinning_on_every_core_reads_as_busy() -> None:
    """Real processes holding every core: the sample sees them (whatever else the machine is doing adds to it)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(logical_cores())]
    try:
        assert busy_cores() >= logical_cores() - 0.5
        assert not spin_wait_fits(1)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_the_wait_policy_reaches_both_llama_cpp_engines(bundled_gguf: Path) -> None:
    info = read_gguf_info(bundled_gguf)
    busy, idle = default_plan("m", info, busy=100.0), default_plan("m", info, busy=0.0)
    assert busy.threads == idle.threads == physical_cores()
    for engine in (LlamaCppPythonEngine(), LlamaServerEngine()):
        assert engine.build_command(busy, 1, "k").env["OMP_WAIT_POLICY"] == "passive"
        if idle.spin_wait:
            spinning = engine.build_command(idle, 1, "k").env
            assert "OMP_WAIT_POLICY" not in spinning and spinning["GOMP_SPINCOUNT"] == str(SPIN_COUNT)


def test_llama_server_gets_its_slots_and_llama_cpp_python_its_cache(bundled_gguf: Path) -> None:
    info = read_gguf_info(bundled_gguf)
    server, single = default_plan("m", info, "llama-server"), default_plan("m", info)
    assert server.parallel == DEFAULT_SLOTS >= 2 and server.prompt_cache_bytes == 0
    assert single.parallel == 1 and single.prompt_cache_bytes > 0


def test_llama_server_gets_a_default_context_per_slot(bundled_gguf: Path) -> None:
    """Its slots share `-c` (--kv-unified): sized for one conversation, concurrent requests that together outgrow
    it are refused with HTTP 500 "Context size has been exceeded". llama-cpp-python's one slot keeps 4096."""
    info = read_gguf_info(bundled_gguf)
    assert info.context_length is not None and info.context_length >= DEFAULT_CONTEXT  # 8192
    server = default_plan("m", info, "llama-server")
    assert server.context_length == DEFAULT_CONTEXT * DEFAULT_SLOTS and server.parallel == DEFAULT_SLOTS
    assert default_plan("m", info, "llama-server", parallel=8).context_length == DEFAULT_CONTEXT * 8
    assert default_plan("m", info).context_length == DEFAULT_CONTEXT
    argv = LlamaServerEngine().build_command(server, 1, "k").argv
    assert argv[argv.index("-c") + 1] == str(DEFAULT_CONTEXT * DEFAULT_SLOTS) and "--kv-unified" in argv
    # A model trained on less: that much per slot.
    short = replace(info, metadata={**info.metadata, f"{info.architecture}.context_length": 2048})
    assert short.context_length == 2048
    assert default_plan("m", short, "llama-server").context_length == 2048 * DEFAULT_SLOTS
    assert default_plan("m", short).context_length == 2048
