"""A safetensors folder model served by vLLM through the service, end to end: the folder in the models folder, the
managed vLLM environment installed with pip from a local wheel, the service started as a process, and the official
`openai` client streaming a chat that starts the engine just in time.

Two things cannot exist here and are stood in for, as small as they can be:
- the GPU: the service's NVML answers for the recorded H200 profile (tests/support/recorded_nvml.py, loaded into the
  service process by tests/support/nvml_site/sitecustomize.py); everything above NVML runs for real;
- vLLM itself (CUDA and torch): the wheel is the tiny `vllm` of tests/support/fake_wheel.py whose `vllm serve` is the
  stand-in server of tests/support/vllm_standin.py. It checks its command line against vLLM 0.34.0's real schema,
  prints vLLM's start-up lines, answers /health 503 then 200, demands the key on /v1, serves vLLM's /metrics names
  and stops on SIGTERM; its answers are fixed words and its KV cache figures a small computation of its own.
The refusals (no GPU, no vLLM) are checked on the manager with recorded profiles and a vLLM that is or is not there.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec
from app.installs.vllm_env import VLLMInstall, install_vllm
from app.paths import AppPaths
from app.planner.calibration import CalibrationStore
from app.service.engines import EngineManager
from app.service.events import EventBus
from app.service.launch.folder_models import plan_folder
from app.service.launch.lifecycle import LifecyclePolicy
from app.service.launch.overrides import BadOverrides, PlanOverrides
from app.task import TaskState
from engines.registry import ENGINES
from engines.states import EngineState
from engines.vllm import VLLMEngine
from tests.app.cli.test_cli import modeldeck
from tests.app.installs.test_vllm_env import OFFLINE_ENV
from tests.support.fake_wheel import build_vllm_standin
from tests.support.recorded_nvml import PROFILE_ENV
from tests.support.service import REPO, RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

PROFILES = REPO / "tests" / "fixtures" / "hardware"
H200 = PROFILES / "h200.json"
NVML_SITE = Path(__file__).resolve().parents[2] / "support" / "nvml_site"
MODEL_ID = "tiny-llama"
ANSWER = "Hello from the vLLM stand-in."


def tiny_folder(folder: Path, elements: int = 1024) -> Path:
    """A model folder as vLLM reads it: config.json with a 7B-like attention layout (so the KV cache per token, and
    with it the concurrency, are those of a real model) beside a real, tiny, safetensors file. `elements` above 1024
    make its header claim more weights than the file holds (for the planner, which reads headers only)."""
    folder.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
        "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tensor = {"dtype": "BF16", "shape": [elements], "data_offsets": [0, 2 * elements]}
    header = json.dumps({"model.embed_tokens.weight": tensor})
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(2048))
    return folder


def profile(path: Path) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads(path.read_text(encoding="utf-8")))


def install_standin(paths: AppPaths, tmp_path: Path) -> VLLMInstall:
    wheels = tmp_path / "wheels"
    build_vllm_standin(wheels)
    return install_vllm(
        paths, "0.34.0", TaskState(), pip_args=["--no-index", "--find-links", str(wheels)], env=OFFLINE_ENV
    )


def series_of(service: RunningService, name: str) -> list[dict[str, Any]]:
    series: list[dict[str, Any]] = service.client.series(60, names=[name], model=MODEL_ID)["series"]
    return series


def test_openai_stream_starts_the_folder_model_on_vllm_and_stop_ends_it(
    paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_folder(paths.models_dir / MODEL_ID)
    install = install_standin(paths, tmp_path)
    gpu_memory = profile(H200).gpus[0].memory_total
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(NVML_SITE), str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv(PROFILE_ENV, str(H200))
    monkeypatch.setenv("VLLM_STANDIN_GPU_MEMORY", str(gpu_memory))
    # What `modeldeck recommend` plans for this folder on that machine: the service must launch exactly this.
    recommended = modeldeck("recommend", MODEL_ID, "--use", "serve", "--hardware", str(H200), "--json")
    assert recommended.returncode == 0, recommended.stderr
    best = json.loads(recommended.stdout)["best"]
    assert best["engine"] == "vllm" and best["command"][:2] == [str(install.executable), "serve"]

    service = start_service_process(paths, tmp_path)
    try:
        listed = service.model(MODEL_ID)
        assert listed["engine"] == "vllm" and listed["state"] == "stopped"
        stream = service.openai_client().chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Say hello"}], stream=True, max_tokens=32
        )
        pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
        assert "".join(pieces) == ANSWER and len([p for p in pieces if p]) == 7  # streamed, one piece per token

        described = service.model(MODEL_ID)
        assert described["state"] == "ready", described["message"]
        engine = psutil.Process(described["pid"])
        port = described["port"]
        expected = [str(described["port"]) if arg == "<port>" else arg for arg in best["command"]]
        assert engine.cmdline()[1:] == expected  # [0] is the environment's python running its `vllm` script
        key = engine.environ()["VLLM_API_KEY"]
        assert len(key) >= 32 and key not in " ".join(engine.cmdline())  # the key stays off the command line

        # What vLLM said while starting, in the listing beside what the planner predicted.
        startup, planned = described["startup"], described["vllm"]
        assert startup is not None and planned is not None
        assert described["plan"] is None  # nothing a client could override (the GGUF-shaped summary would mislead)
        assert startup["kv_cache_tokens"] > 100_000 and startup["concurrency_length"] == 8192
        assert startup["max_concurrency"] == pytest.approx(startup["kv_cache_tokens"] / 8192, abs=0.01)
        assert any(line.startswith("KV cache: ") for line in startup["summary"])
        seqs = best["parameters"]["max_num_seqs"]
        assert planned["parameters"]["max_num_seqs"] == seqs == planned["predicted_max_concurrency"]
        assert (
            planned["check"][0].startswith("KV cache tokens")
            and f"{startup['kv_cache_tokens']:,}" in planned["check"][0]
        )
        # The gateway lets through what the KV cache holds at full length, as vLLM reported it (less than planned).
        assert described["max_concurrent_requests"] == min(seqs, int(startup["max_concurrency"])) < seqs
        # Readiness came from /health, which answered 503 while the engine was loading.
        lines = service.client.logs(MODEL_ID)
        health = [line for line in lines if '"GET /health HTTP/1.1"' in line]
        assert " 503 " in health[0] and " 200 " in health[-1]
        # The start-up went to calibration: the GPU memory outside the KV cache vLLM reported, against the plan's.
        [measurement] = CalibrationStore(paths.calibration_db).recent("vllm")
        assert measurement.model_id == MODEL_ID and measurement.architecture == "LlamaForCausalLM"
        assert measurement.measured_vram == int(gpu_memory * 0.9) - int(
            float(next(line for line in lines if "Available KV cache memory" in line).split()[-2]) * 2**30
        )
        # The engine's own key check: nothing answers without the service's internal key.
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models")
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(request, timeout=5)
        # vLLM's metrics, translated: once scraped, a second request (not streamed) shows as generated tokens/s.
        wait_for(lambda: series_of(service, "engine_requests_running"), 30, "the first scrape of the engine")
        answer = service.openai_client().chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "Again"}], max_tokens=32
        )
        assert answer.choices[0].message.content == ANSWER
        wait_for(
            lambda: any(v for s in series_of(service, "engine_generation_tokens_per_s") for v in s["v"] if v),
            30,
            "the engine's generated tokens as a rate",
        )
        assert series_of(service, "engine_kv_cache_usage")  # vllm:kv_cache_usage_perc under our name
        # The GPU memory the engine holds, per model, read through NVML for its processes.
        wait_for(lambda: series_of(service, "gpu_process_memory_bytes"), 30, "the engine's GPU memory")

        service.client.stop_model(MODEL_ID)
        stopped = service.model(MODEL_ID)
        assert stopped["state"] == "stopped" and stopped["pid"] is None
        assert not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE
        assert "INFO:     Application shutdown complete." in service.client.logs(MODEL_ID)  # SIGTERM, then clean
    finally:
        stop_service_process(service)


def _manager(
    paths: AppPaths, machine: str, vllm: Path, elements: int = 1024, lifecycle: LifecyclePolicy | None = None
) -> EngineManager:
    folder = tiny_folder(paths.models_dir / MODEL_ID, elements)
    spec = ModelSpec(MODEL_ID, MODEL_ID, folder, 2056, "local", engine="vllm")
    engines = {**ENGINES, "vllm": VLLMEngine(vllm)}
    return EngineManager(
        {MODEL_ID: spec}, paths, EventBus(), lifecycle=lifecycle, engines=engines,
        hardware=lambda: profile(PROFILES / machine),
    )  # fmt: skip


def _script_vllm(directory: Path) -> Path:
    """A `vllm` that answers `--version` (detection only: these starts are refused before anything runs)."""
    directory.mkdir(parents=True)
    script = directory / "vllm"
    script.write_text("#!/bin/sh\necho 0.34.0\n", encoding="utf-8")
    script.chmod(0o755)
    return script


NO_GPU = (
    "vLLM needs an NVIDIA GPU with compute capability >= 7.0; this machine has none; on this machine, pull a GGUF "
    "variant of the model instead (`modeldeck pull REPO:Q4_K_M`)"
)
NO_VLLM = (
    "vLLM is not installed (no `vllm` executable in its environment); install it with `modeldeck vllm-env install`, "
    "or use yours with `modeldeck vllm-env use PATH`"
)


@pytest.mark.parametrize(
    ("machine", "installed", "missing"),
    [
        ("laptop_8core_16gb.json", True, [NO_GPU]),
        ("m2max_32gb.json", True, [NO_GPU]),
        ("h200.json", False, [NO_VLLM]),
        ("laptop_8core_16gb.json", False, [NO_GPU, NO_VLLM]),
    ],
)
def test_a_folder_model_is_refused_with_what_is_missing(
    paths: AppPaths, tmp_path: Path, machine: str, installed: bool, missing: list[str]
) -> None:
    vllm = _script_vllm(tmp_path / "bin") if installed else tmp_path / "nowhere" / "vllm"
    manager = _manager(paths, machine, vllm)
    assert asyncio.run(manager.start(MODEL_ID)) == EngineState.FAILED
    described = manager.describe(MODEL_ID)
    assert described["message"] == (
        f"{MODEL_ID} is a safetensors model for vLLM, which cannot start here: {'. '.join(missing)}."
    )
    assert described["pid"] is None and described["vllm"] is None


def test_launch_overrides_are_refused_for_a_folder_model(paths: AppPaths, tmp_path: Path) -> None:
    manager = _manager(paths, "h200.json", _script_vllm(tmp_path / "bin"))
    with pytest.raises(BadOverrides, match="launch overrides apply to GGUF models only"):
        asyncio.run(manager.check_start(MODEL_ID, PlanOverrides(context=4096)))
    asyncio.run(manager.check_start(MODEL_ID, PlanOverrides()))  # `{}`: what the wizard sends for a vLLM option


def test_a_folder_model_too_large_for_the_gpu_is_refused_with_the_planners_reasons(
    paths: AppPaths, tmp_path: Path
) -> None:
    manager = _manager(paths, "rtx4090_24gb.json", _script_vllm(tmp_path / "bin"), elements=20_000_000_000)  # 40 GB
    assert asyncio.run(manager.start(MODEL_ID)) == EngineState.FAILED
    message = manager.describe(MODEL_ID)["message"]
    assert message.startswith(f"{MODEL_ID} has no vLLM plan that fits this machine: ")
    assert "continuous batching for 1 users" in message  # the last try: one user at a time (chat)
    assert "KV cache 0 tokens: 0 requests of 8192 tokens at once" in message


def test_the_memory_cap_counts_the_vllm_plan_not_the_folder_size(paths: AppPaths, tmp_path: Path) -> None:
    """The footprint against --max-memory is the vLLM plan's (its share of GPU memory and host memory), not the
    2 KB of the folder's files."""
    vllm = _script_vllm(tmp_path / "bin")
    manager = _manager(paths, "h200.json", vllm, lifecycle=LifecyclePolicy(max_loaded_bytes=100 << 30))
    spec = manager.models[MODEL_ID]
    planned = plan_folder(spec, VLLMEngine(vllm), profile(H200), CalibrationStore(tmp_path / "c.sqlite"))
    memory = planned.option.memory
    assert planned.footprint == memory.ram + memory.vram > 100 << 30  # 90 % of the H200 and the host's runtime
    assert asyncio.run(manager.start(MODEL_ID)) == EngineState.FAILED
    assert manager.describe(MODEL_ID)["message"] == (
        f"{MODEL_ID} needs about {planned.footprint >> 20} MiB, more than the cap of {100 << 10} MiB"
    )
