"""TensorRT-LLM's OpenAI-compatible server (`trtllm-serve MODEL`), PyTorch backend, from its own environment.

Flags from the `serve` command's click options (tests/fixtures/engine_cli/trtllm-serve.json). trtllm-serve has no API
key option: it is bound to 127.0.0.1 and reached only through ModelDeck's gateway, which checks the key, but any
local user could reach its port.

Its Prometheus metrics at /prometheus/metrics exist only with `return_perf_metrics`, and the gauges filled from
iteration statistics (requests running and waiting, KV cache use, iteration latency, GPU memory) only with
`enable_iter_perf_stats` (tensorrt_llm/serve/openai_server.py and metrics/collector.py). Both are LLM API options
that `serve` takes only from a YAML file (`--extra_llm_api_options`), which the command asks the supervisor to write.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from engines.base import GPU_SERVER_QUIET_START_S, Capabilities, EngineCommand, Installation, LaunchPlan
from engines.installed import distribution_version, find_executable, sibling_python

EXECUTABLE = "trtllm-serve"
DISTRIBUTION = "tensorrt_llm"
INSTALL_HINT = "pip install tensorrt_llm --extra-index-url https://pypi.nvidia.com (Linux, NVIDIA GPU)"
LLM_API_OPTIONS = "return_perf_metrics: true\nenable_iter_perf_stats: true\n"


class TRTLLMEngine:
    """In-flight batching with TensorRT kernels on NVIDIA GPUs; readiness through /health."""

    name = "trtllm"
    capabilities = Capabilities(max_concurrency=256, stream_usage=True, quiet_start_s=GPU_SERVER_QUIET_START_S)

    def __init__(self, executable: Path | None = None, path: str | None = None, run_dir: Path | None = None) -> None:
        self.executable = executable
        self._path = path
        # Where the options file goes (the service's engine records); the system's temporary directory otherwise.
        self.run_dir = run_dir

    def detect(self) -> Installation:
        executable = find_executable(EXECUTABLE, self._path, self.executable)
        if executable is None:
            return Installation(False, None, f"TensorRT-LLM is not installed: {INSTALL_HINT}")
        python = sibling_python(executable)
        version = distribution_version(python, DISTRIBUTION) if python else None
        where = f"{EXECUTABLE} at {executable}"
        return Installation(True, version, f"TensorRT-LLM {version or '(version unknown)'}: {where}")

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        executable = find_executable(EXECUTABLE, self._path, self.executable)
        options = (self.run_dir or Path(tempfile.gettempdir())) / f"trtllm-{port}-llm-api-options.yaml"
        argv = [
            str(executable or EXECUTABLE), plan.model_ref or str(plan.model_path),
            "--host", "127.0.0.1",
            "--port", str(port),
            "--backend", "pytorch",
            "--tp_size", str(plan.tensor_parallel_size),
            "--max_seq_len", str(plan.context_length),
            "--extra_llm_api_options", str(options),
        ]  # fmt: skip
        if plan.max_num_seqs is not None:
            argv += ["--max_batch_size", str(plan.max_num_seqs)]
        if plan.gpu_memory_utilization is not None:
            argv += ["--kv_cache_free_gpu_memory_fraction", str(plan.gpu_memory_utilization)]
        return EngineCommand(argv=tuple(argv), ready_path="/health", files={options: LLM_API_OPTIONS})
