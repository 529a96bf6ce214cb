"""GPU check: what ModelDeck sees and plans on an NVIDIA machine, and how its memory predictions hold up there.

A maintainer with an NVIDIA GPU runs it in one go from the repository root (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/gpu_check.py [--vllm-model DIR] [--gguf FILE] [--context 4096]

1. Detection through NVML (app.hardware): every GPU, or why none can be used.
2. The planner's recommendation for Llama 3.1 8B and 70B (their published config.json and file sizes, no download)
   on this machine, for one user and for eight.
3. Launches, each where its engine is installed and a supported GPU exists, printing predicted against measured
   memory (NVML per-process GPU memory, resident memory of the process tree):
   - vLLM (registered with `modeldeck vllm-env`, or `vllm` on PATH) on `--vllm-model`, a local model folder in
     Hugging Face layout: its start-up log's KV cache size and weights beside the planner's figures, recorded in
     the calibration store (engine "vllm");
   - llama-server (on PATH, or $LLAMA_SERVER) and llama-cpp-python when built with CUDA, on `--gguf` (the bundled
     SmolLM2 by default) with every layer on the GPU.
   Each engine is stopped with the supervisor's graceful stop, which waits until its GPU memory is released.

On a machine without an NVIDIA GPU it prints the detection and the recommendations, says plainly that there is no
GPU, and skips the launches.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.hardware.detect import detect_hardware
from app.hardware.detector import GPUDetection
from app.hardware.nvidia import process_vram
from app.hardware.profile import GPUInfo, HardwareProfile
from app.hardware.summary import format_profile
from app.hub.library import bundled_model
from app.installs.vllm_env import InstallError, registered
from app.installs.vllm_gpu import vllm_gpu_problem
from app.paths import app_paths
from app.planner.calibration import CalibrationStore
from app.planner.facts import ModelFacts, facts_from_gguf
from app.planner.memory import MemoryEstimate, llama_cpp_memory, vllm_memory
from app.planner.plans import safetensors_variant
from app.planner.recommend import Variant, recommend
from app.planner.summary import summary_lines
from app.planner.vllm_check import check_startup, startup_measurement
from app.service.launch.memory_check import tree_pids, tree_rss
from engines.base import EngineCommand, LaunchPlan
from engines.gguf import read_gguf_info
from engines.llama_cpp import LlamaCppPythonEngine
from engines.supervisor import EngineSupervisor, SupervisorPolicy
from engines.vllm import VLLMEngine
from engines.vllm_log import VLLMStartup, parse_line

MIB = 2**20
KEY = "gpu-check-key"


def _llama(layers: int, heads: int, embd: int, ffn: int, parameters: int, fmt: str, name: str, size: float) -> Variant:
    # Llama 3.1's published config.json: 8 KV heads of 128, vocabulary 128256, trained on 131072 tokens.
    facts = ModelFacts(
        format=fmt, architecture="llama", parameters=parameters, layers=layers, attention_heads=heads,
        kv_heads=(8,) * layers, head_dim_k=128, head_dim_v=128, embedding_length=embd, feed_forward_length=ffn,
        vocab_size=128256, trained_context=131072, quantization=name, weight_bytes=int(size), chat_template=True,
    )  # fmt: skip
    return Variant(name, facts, f"meta-llama/{name}")


def _models() -> dict[str, list[Variant]]:
    b8, b70 = (32, 32, 4096, 14336, 8_030_261_248), (80, 64, 8192, 28672, 70_553_706_496)
    return {
        "Llama 3.1 8B": [
            *(_llama(*b8, "gguf", q, s) for q, s in {"Q8_0": 8.54e9, "Q4_K_M": 4.92e9}.items()),
            *(_llama(*b8, "safetensors", q, s) for q, s in {"BF16": 16.07e9, "FP8": 9.08e9}.items()),
        ],
        "Llama 3.1 70B": [
            *(_llama(*b70, "gguf", q, s) for q, s in {"Q8_0": 74.98e9, "Q4_K_M": 42.52e9}.items()),
            *(_llama(*b70, "safetensors", q, s) for q, s in {"BF16": 141.1e9, "FP8": 72.7e9, "AWQ": 39.77e9}.items()),
        ],
    }


def section(title: str) -> None:
    print(f"\n== {title} ==")


def recommendations(hardware: HardwareProfile) -> None:
    for name, variants in _models().items():
        for use, users in (("chat", None), ("serve", 8)):
            section(f"{name}, {use}" + (f" for {users} users" if users else ""))
            print(
                "\n".join(line for line in summary_lines(name, recommend(hardware, variants, use, users=users)) if line)
            )


@dataclass
class Launched:
    supervisor: EngineSupervisor
    startup: VLLMStartup


def _port_placeholder(command: EngineCommand) -> EngineCommand:
    """The command with its port left as "<port>", filled in by the supervisor's free port at each launch."""
    pairs = zip(("", *command.argv), command.argv, strict=False)
    argv = tuple("<port>" if prev == "--port" else arg for prev, arg in pairs)
    return replace(command, argv=argv)


async def launch(name: str, command: EngineCommand, workdir: Path, timeout_s: float) -> Launched | None:
    startup = [VLLMStartup()]

    def on_log(_model: str, line: str) -> None:
        startup[0] = parse_line(startup[0], line)

    supervisor = EngineSupervisor(
        name, lambda port: replace(command, argv=tuple(a.replace("<port>", str(port)) for a in command.argv)),
        workdir / f"{name}.log", workdir / "records", on_log=on_log,
        policy=SupervisorPolicy(ready_timeout_s=timeout_s, max_failures=1, gpu_release_timeout_s=60),
        gpu_memory_probe=process_vram,
    )  # fmt: skip
    print(f"starting {name}: {' '.join(command.argv)}", flush=True)
    await supervisor.start()
    if supervisor.pid is None:
        print(f"{name} did not start: {supervisor.message}")
        await supervisor.stop()
        return None
    return Launched(supervisor, startup[0])


def compare(predicted: MemoryEstimate, pid: int) -> None:
    vram, rss = process_vram(tree_pids(pid)), tree_rss(pid)
    gpus = max(predicted.gpus, 1)
    print(
        f"GPU memory   predicted {predicted.vram * gpus / MIB:>9,.0f} MiB   measured "
        + (f"{vram / MIB:,.0f} MiB" if vram is not None else "unknown (NVML per-process reading failed)")
    )
    print(
        f"host memory  predicted {predicted.ram_at_load / MIB:>9,.0f} MiB   measured "
        + (f"{rss / MIB:,.0f} MiB" if rss is not None else "unknown")
    )
    if vram:
        print(f"GPU error    {(predicted.vram * gpus - vram) / vram:+.1%} (positive: predicted too much)")


async def stop(launched: Launched) -> None:
    await launched.supervisor.stop()
    release = launched.supervisor.gpu_release
    print(release.text() if release else "stopped")


async def check_vllm(gpu: GPUInfo, model: Path, context: int, workdir: Path) -> None:
    section("vLLM")
    try:
        install = registered(app_paths())
    except InstallError as exc:
        print(f"the registered vLLM is unreadable: {exc}")
        install = None
    executable = install.executable if install else (Path(p) if (p := shutil.which("vllm")) else None)
    if executable is None:
        print("vLLM is not installed: `modeldeck vllm-env install`. Skipped.")
        return
    if not (model / "config.json").is_file():
        print("no --vllm-model folder (config.json beside *.safetensors) given: skipped.")
        return
    facts = safetensors_variant(model).facts
    utilization = round(min(0.9, (gpu.memory_free or gpu.memory_total) / gpu.memory_total - 0.02), 2)
    plan = LaunchPlan(model.name, model, context, 0, model_ref=str(model), gpu_memory_utilization=utilization,
                      embeddings=False)  # fmt: skip
    command = _port_placeholder(VLLMEngine(executable).build_command(plan, 0, KEY))
    launched = await launch("vllm", command, workdir, timeout_s=900)
    if launched is None:
        return
    try:
        predicted = vllm_memory(facts, gpu.memory_total, max_model_len=context, gpu_memory_utilization=utilization)
        startup = launched.startup
        print("\n".join(startup.summary()))
        check = check_startup(predicted, startup, gpu.memory_total, utilization)
        print("\n".join(check.lines()))
        architecture = facts.architecture or "unknown"
        measurement = startup_measurement(check, predicted, architecture=architecture, model_id=model.name,
                                          context=context)  # fmt: skip
        if measurement is not None:  # what later vLLM predictions for this architecture are corrected by
            CalibrationStore(app_paths().calibration_db).record(measurement)
            print(f"recorded for calibration: non-KV GPU memory error {measurement.error:+.1%}")
        assert launched.supervisor.pid is not None
        compare(predicted, launched.supervisor.pid)
    finally:
        await stop(launched)


def _llama_cpp_python_has_cuda() -> bool:
    probe = "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120, check=False).returncode == 0


async def check_llama(gguf: Path, context: int, workdir: Path) -> None:
    facts = facts_from_gguf(read_gguf_info(gguf))
    layers = (facts.layers or 0) + 1
    server = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    section("llama-server")
    if server is None:
        print("llama-server is not on PATH (nor in $LLAMA_SERVER): skipped.")
    else:
        argv = (server, "-m", str(gguf), "--host", "127.0.0.1", "--port", "<port>", "-c", str(context),
                "-ngl", str(layers), "--no-webui")  # fmt: skip
        launched = await launch("llama-server", EngineCommand(argv, {"LLAMA_API_KEY": KEY}, "/health"), workdir, 300)
        if launched is not None:
            try:
                assert launched.supervisor.pid is not None
                # The runtime figure is llama-cpp-python's; llama-server's own process is smaller (no interpreter).
                compare(
                    llama_cpp_memory(facts, context, gpu_layers=layers, gpu_backend="cuda"), launched.supervisor.pid
                )
            finally:
                await stop(launched)
    section("llama-cpp-python")
    if not _llama_cpp_python_has_cuda():
        print(
            "ModelDeck's llama-cpp-python is built without CUDA: skipped "
            "(CMAKE_ARGS='-DGGML_CUDA=on' pip install --force-reinstall --no-binary llama-cpp-python ...)."
        )
        return
    plan = LaunchPlan(gguf.stem, gguf, context, os.cpu_count() or 1, gpu_layers=layers)
    command = _port_placeholder(LlamaCppPythonEngine().build_command(plan, 0, KEY))
    launched = await launch("llama-cpp-python", command, workdir, 300)
    if launched is not None:
        try:
            assert launched.supervisor.pid is not None
            compare(llama_cpp_memory(facts, context, gpu_layers=layers, gpu_backend="cuda"), launched.supervisor.pid)
        finally:
            await stop(launched)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-model", type=Path, default=None, help="a local model folder for the vLLM launch")
    parser.add_argument("--gguf", type=Path, default=None, help="a GGUF file for llama.cpp (the bundled model)")
    parser.add_argument("--context", type=int, default=4096)
    args = parser.parse_args()

    section("Hardware (NVML)")
    paths = app_paths()
    hardware = detect_hardware(paths.models_dir, bandwidth_cache=paths.bandwidth_cache)
    print(format_profile(hardware))
    recommendations(hardware)

    section("Launches")
    nvidia = [gpu for gpu in hardware.nvidia_gpus if not gpu.mig_enabled]
    if not nvidia:
        why = "; ".join(problem.problem.rstrip(".") for problem in hardware.gpu_problems) or "NVML found none"
        print(f"There is no NVIDIA GPU on this machine ({why}). Skipping the launches.")
        return 0
    problem = vllm_gpu_problem(GPUDetection(gpus=tuple(nvidia)))
    with tempfile.TemporaryDirectory(prefix="modeldeck-gpu-check-") as tmp:
        workdir = Path(tmp)
        if problem:
            section("vLLM")
            print(f"{problem}: skipped.")
        else:
            asyncio.run(check_vllm(nvidia[0], args.vllm_model or Path("/nonexistent"), args.context, workdir))
        spec = bundled_model()
        gguf = args.gguf or (spec.path if spec else None)
        if gguf is None:
            print("no GGUF file: pass --gguf FILE (the bundled model is not installed). llama.cpp skipped.")
        else:
            asyncio.run(check_llama(gguf, args.context, workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
