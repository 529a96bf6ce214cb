"""vLLM's OpenAI-compatible server (`vllm serve`), run from its own virtual environment, never ModelDeck's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from engines.base import GPU_SERVER_QUIET_START_S, Capabilities, EngineCommand, Installation, LaunchPlan
from engines.vllm_log import VLLMStartup, parse_line


class VLLMEngine:
    """`vllm serve`: continuous batching on NVIDIA GPUs, readiness through /health."""

    name = "vllm"
    capabilities = Capabilities(
        max_concurrency=256, stream_usage=True, tokenize_count_path=None, quiet_start_s=GPU_SERVER_QUIET_START_S
    )

    def __init__(self, executable: Path | None = None) -> None:
        self.executable = executable

    def _executable(self) -> str | None:
        if self.executable is not None:
            return str(self.executable) if self.executable.is_file() else None
        return shutil.which("vllm")

    def read_startup_line(self, before: VLLMStartup, line: str) -> VLLMStartup:
        """vLLM's start-up log: its KV cache memory and the requests it can serve at once (engines.vllm_log)."""
        return parse_line(before, line)

    def detect(self) -> Installation:
        executable = self._executable()
        if executable is None:
            return Installation(False, None, "vLLM is not installed (no `vllm` executable in its environment)")
        try:
            done = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Installation(False, None, f"{executable} --version failed: {exc}")
        version = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None
        if version is None:
            return Installation(False, None, f"{executable} --version exited with {done.returncode}")
        return Installation(True, version, f"vLLM {version} at {executable}")

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        argv = [
            self._executable() or "vllm", "serve", plan.model_ref or str(plan.model_path),
            "--served-model-name", plan.model_id,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--max-model-len", str(plan.context_length),
            "--tensor-parallel-size", str(plan.tensor_parallel_size),
            "--enable-prefix-caching",
        ]  # fmt: skip
        if plan.pipeline_parallel_size > 1:
            argv += ["--pipeline-parallel-size", str(plan.pipeline_parallel_size)]
        if plan.distributed_executor_backend:
            argv += ["--distributed-executor-backend", plan.distributed_executor_backend]
        if plan.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", str(plan.gpu_memory_utilization)]
        if plan.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(plan.max_num_seqs)]
        if plan.max_num_batched_tokens is not None:
            argv += ["--max-num-batched-tokens", str(plan.max_num_batched_tokens)]
        if plan.dtype:
            argv += ["--dtype", plan.dtype]
        if plan.quantization:
            argv += ["--quantization", plan.quantization]
        return EngineCommand(
            argv=tuple(argv),
            # vLLM reads VLLM_API_KEY when --api-key is not given, which keeps the key off the command line.
            env={"VLLM_API_KEY": api_key},
            ready_path="/health",
            secrets=(api_key,),
        )
