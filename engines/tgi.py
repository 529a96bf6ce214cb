"""Hugging Face Text Generation Inference (`text-generation-launcher`), with its Messages API (/v1/chat/completions).

Flags from the launcher's documented arguments (tests/fixtures/engine_cli/tgi-launcher.json: the launcher is Rust
and not on PyPI). The key travels in the API_KEY environment variable the launcher reads, never on its command line.
Anonymous usage statistics, on by default, are turned off: ModelDeck sends nothing anywhere.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from engines.base import GPU_SERVER_QUIET_START_S, Capabilities, EngineCommand, Installation, LaunchPlan
from engines.installed import command_output, find_executable

EXECUTABLE = "text-generation-launcher"
INSTALL_HINT = "install TGI from its sources or use its container (it is not on PyPI)"
QUANTIZE = {"awq", "gptq", "fp8", "marlin", "eetq", "exl2", "bitsandbytes", "compressed-tensors"}


class TGIEngine:
    """Continuous batching and tensor parallelism (`--num-shard`) on NVIDIA GPUs; readiness through /health."""

    name = "tgi"
    capabilities = Capabilities(max_concurrency=128, stream_usage=True, quiet_start_s=GPU_SERVER_QUIET_START_S)

    def __init__(self, executable: Path | None = None, path: str | None = None) -> None:
        self.executable = executable
        self._path = path

    def detect(self) -> Installation:
        executable = find_executable(EXECUTABLE, self._path, self.executable)
        if executable is None:
            return Installation(False, None, f"TGI is not installed: {INSTALL_HINT}")
        line = command_output([str(executable), "--version"])  # "text-generation-launcher 3.3.4"
        if line is None:
            return Installation(False, None, f"{executable} --version failed")
        version = line.split()[-1]
        return Installation(True, version, f"TGI {version} at {executable}")

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        executable = find_executable(EXECUTABLE, self._path, self.executable)
        argv = [
            str(executable or EXECUTABLE),
            "--model-id", plan.model_ref or str(plan.model_path),
            "--hostname", "127.0.0.1",
            "--port", str(port),
            "--num-shard", str(plan.tensor_parallel_size),
            "--max-total-tokens", str(plan.context_length),
            "--max-input-tokens", str(max(1, plan.context_length - 1)),
            "--usage-stats", "off",
            # The shards' socket defaults to one fixed path: two launchers on one machine would share it.
            "--shard-uds-path", str(Path(tempfile.gettempdir()) / f"modeldeck-tgi-{port}"),
        ]  # fmt: skip
        if plan.max_num_seqs is not None:
            argv += ["--max-concurrent-requests", str(plan.max_num_seqs)]
        if plan.gpu_memory_utilization is not None:
            argv += ["--cuda-memory-fraction", str(plan.gpu_memory_utilization)]
        if plan.quantization in QUANTIZE:
            argv += ["--quantize", plan.quantization]
        elif plan.dtype in ("float16", "bfloat16"):  # the launcher refuses --dtype beside --quantize
            argv += ["--dtype", plan.dtype]
        return EngineCommand(
            argv=tuple(argv),
            env={"API_KEY": api_key},
            ready_path="/health",
            ready_headers={"Authorization": f"Bearer {api_key}"},
            secrets=(api_key,),
        )
