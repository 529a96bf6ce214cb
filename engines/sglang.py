"""SGLang's OpenAI-compatible server (`python -m sglang.launch_server`), run from the environment it is installed in.

Flags checked against SGLang 0.5.23's own declarations (tests/fixtures/engine_cli/sglang-0.5.23.json). SGLang has no
environment variable for its API key, and a command line is readable by every local user (`ps`), so the internal key
goes in a YAML file that only this user can read, named by `--config` (SGLang's server_args_config_parser turns the
file's keys into flags; it insists on a `.yaml` suffix). The supervisor writes the file and removes it when the
engine stops.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from engines.base import GPU_SERVER_QUIET_START_S, Capabilities, EngineCommand, Installation, LaunchPlan
from engines.installed import distribution_version, find_executable, sibling_python

DISTRIBUTION = "sglang"
INSTALL_HINT = "pip install sglang (in an environment of its own, with CUDA torch)"


class SGLangEngine:
    """RadixAttention prefix caching and continuous batching on NVIDIA (and AMD) GPUs; readiness through /health."""

    name = "sglang"
    capabilities = Capabilities(max_concurrency=256, stream_usage=True, quiet_start_s=GPU_SERVER_QUIET_START_S)

    def __init__(self, python: Path | None = None, path: str | None = None, run_dir: Path | None = None) -> None:
        self.python = python  # an interpreter that has sglang; otherwise the one beside `sglang` on PATH
        self._path = path
        self.run_dir = run_dir  # where the options file goes (the service's private state folder)

    def _python(self) -> Path | None:
        if self.python is not None:
            return self.python if self.python.is_file() else None
        script = find_executable("sglang", self._path)
        return sibling_python(script) if script else None

    def detect(self) -> Installation:
        python = self._python()
        if python is None:
            return Installation(False, None, f"SGLang is not installed: {INSTALL_HINT}")
        version = distribution_version(python, DISTRIBUTION)
        if version is None:
            return Installation(False, None, f"{python} has no sglang package: {INSTALL_HINT}")
        return Installation(True, version, f"SGLang {version} in {python.parent.parent}")

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        python = self._python()
        options = (self.run_dir or Path(tempfile.gettempdir())) / f"sglang-{port}-options.yaml"
        argv = [
            str(python) if python else "python", "-m", "sglang.launch_server",
            "--model-path", plan.model_ref or str(plan.model_path),
            "--served-model-name", plan.model_id,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--config", str(options),
            "--tp-size", str(plan.tensor_parallel_size),
            "--context-length", str(plan.context_length),
            "--enable-metrics",
        ]  # fmt: skip
        if plan.gpu_memory_utilization is not None:
            argv += ["--mem-fraction-static", str(plan.gpu_memory_utilization)]
        if plan.max_num_seqs is not None:
            argv += ["--max-running-requests", str(plan.max_num_seqs)]
        if plan.dtype:
            argv += ["--dtype", plan.dtype]
        if plan.quantization:
            argv += ["--quantization", plan.quantization]
        return EngineCommand(
            argv=tuple(argv),
            ready_path="/health",
            ready_headers={"Authorization": f"Bearer {api_key}"},
            secrets=(api_key,),
            files={options: f"api-key: {json.dumps(api_key)}\n"},  # a JSON string is a YAML string
        )
