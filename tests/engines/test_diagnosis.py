"""Engine deaths explained: the real llama.cpp engine out of memory and on a model of an unknown architecture,
and the fault engine dying of an illegal instruction, which no real engine here can be made to do."""

from __future__ import annotations

import dataclasses
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from app.planner.defaults import default_plan
from engines.base import EngineCommand
from engines.diagnosis import diagnose
from engines.gguf import read_gguf_info
from engines.llama_cpp import LlamaCppPythonEngine
from engines.states import EngineState
from tests.engines.test_supervisor import FAST, fault_command, make

# Run the engine under an address-space limit: about 0.7 GiB is what it maps at a 512-token context.
LIMITED = (
    "import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({0}, {0})); os.execv(sys.argv[1], sys.argv[1:])"
)


def llama_command(model: Path, context: int, memory_limit: int | None = None) -> Callable[[int], EngineCommand]:
    plan = dataclasses.replace(default_plan("smollm2", read_gguf_info(model)), context_length=context, embeddings=False)
    engine = LlamaCppPythonEngine()

    def build(port: int) -> EngineCommand:
        command = engine.build_command(plan, port, "key")
        if memory_limit is None:
            return command
        return dataclasses.replace(command, argv=(sys.executable, "-c", LIMITED.format(memory_limit), *command.argv))

    return build


async def test_out_of_memory_is_diagnosed_with_advice(tmp_path: Path, bundled_gguf: Path) -> None:
    # 65536 tokens of KV cache are 1.4 GiB: more than a 1.5 GiB address space leaves after the runtime
    supervisor, _ = make(tmp_path, llama_command(bundled_gguf, 65536, 1536 * 2**20), FAST)
    try:
        assert await supervisor.start() == EngineState.FAILED
        assert supervisor.diagnosis is not None and supervisor.diagnosis.kind == "out_of_memory"
        assert "ran out of memory" in supervisor.message and "smaller context" in supervisor.message
    finally:
        await supervisor.stop()


async def test_unknown_architecture_is_diagnosed(tmp_path: Path, bundled_gguf: Path) -> None:
    data = bundled_gguf.read_bytes()
    renamed = tmp_path / "renamed.gguf"
    # the same file with general.architecture "llamx": it passes the structural preflight, llama.cpp refuses it
    renamed.write_bytes(
        data.replace(b"\x05\x00\x00\x00\x00\x00\x00\x00llama", b"\x05\x00\x00\x00\x00\x00\x00\x00llamx", 1)
    )
    assert read_gguf_info(renamed).architecture == "llamx"
    supervisor, _ = make(tmp_path, llama_command(renamed, 512), FAST)
    try:
        assert await supervisor.start() == EngineState.FAILED
        assert supervisor.diagnosis is not None and supervisor.diagnosis.kind == "unsupported_architecture"
        assert "does not know the model's architecture" in supervisor.message
    finally:
        await supervisor.stop()


async def test_illegal_instruction_is_diagnosed(tmp_path: Path) -> None:
    supervisor, _ = make(tmp_path, fault_command("--die-by-signal", str(int(signal.SIGILL))), FAST)
    try:
        assert await supervisor.start() == EngineState.FAILED
        assert supervisor.diagnosis is not None and supervisor.diagnosis.kind == "cpu_instructions"
    finally:
        await supervisor.stop()


def test_an_unexplained_exit_stays_unexplained() -> None:
    assert diagnose(1, ["starting", "something odd happened"]) is None
    assert diagnose(None, []) is None
