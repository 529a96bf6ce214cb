"""vLLM, SGLang, TGI and TensorRT-LLM command lines for many plans, checked by tests/engines/cli_schema.py against
each engine's own command-line schema in tests/fixtures/engine_cli/: vLLM 0.34.0's and SGLang 0.5.23's extracted
from their wheels (extract_vllm.py, extract_sglang.py), TGI's documented launcher arguments and TensorRT-LLM's
`serve` click options transcribed with their provenance (both are out of reach as packages here). No engine runs:
only the commands are checked."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from engines.base import EngineCommand, LaunchPlan
from engines.sglang import SGLangEngine
from engines.tgi import TGIEngine
from engines.trtllm import TRTLLMEngine
from engines.vllm import VLLMEngine
from tests.engines.cli_schema import check_command, load_schema

KEY = "internal-key-123"
PLANS = [
    LaunchPlan(
        "qwen-7b",
        Path("/models/qwen"),
        context,
        0,
        model_ref=ref,
        tensor_parallel_size=tp,
        gpu_memory_utilization=utilization,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        dtype=dtype,
        quantization=quantization,
        embeddings=False,
    )
    for context, ref, tp, utilization, seqs, batched, dtype, quantization in itertools.product(
        (4096, 32768),
        ("Qwen/Qwen2.5-7B-Instruct", None),
        (1, 2),
        (None, 0.85),
        (None, 64),
        (None, 8192),
        ("bfloat16", "float16", None),
        (None, "awq", "fp8"),
    )
]
SCHEMAS = {"vllm": "vllm-0.34.0.json", "sglang": "sglang-0.5.23.json", "tgi": "tgi-launcher.json",
           "trtllm": "trtllm-serve.json"}  # fmt: skip


def commands(engine: str) -> list[tuple[LaunchPlan, EngineCommand]]:
    adapter = {"vllm": VLLMEngine(), "sglang": SGLangEngine(), "tgi": TGIEngine(), "trtllm": TRTLLMEngine()}[engine]
    return [(plan, adapter.build_command(plan, 41234, KEY)) for plan in PLANS]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi", "trtllm"])
def test_every_plan_gives_a_command_the_engine_accepts(engine: str) -> None:
    schema = load_schema(SCHEMAS[engine])
    program = schema["command"].split()
    for plan, command in commands(engine):
        assert [Path(command.argv[0]).name, *command.argv[1 : len(program)]] == [Path(program[0]).name, *program[1:]]
        args = list(command.argv[len(program) :])
        assert check_command(schema, args) == [], (plan, command.argv)
        assert command.ready_path == "/health"
        assert "127.0.0.1" in args and "41234" in args


def value(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_sglang_carries_the_plan() -> None:
    plan = PLANS[-1]
    command = SGLangEngine().build_command(plan, 41234, KEY)
    assert command.argv[1:3] == ("-m", "sglang.launch_server")
    assert value(command.argv, "--model-path") == (plan.model_ref or str(plan.model_path))
    assert value(command.argv, "--served-model-name") == "qwen-7b"
    assert value(command.argv, "--tp-size") == str(plan.tensor_parallel_size)
    assert value(command.argv, "--context-length") == str(plan.context_length)
    assert "--enable-metrics" in command.argv


def test_sglang_takes_its_key_from_a_private_options_file_not_the_command_line(tmp_path: Path) -> None:
    """A command line is readable by every local user; SGLang's `--config` YAML file carries the key instead."""
    engine = SGLangEngine(run_dir=tmp_path)
    for plan in PLANS:
        command = engine.build_command(plan, 41234, KEY)
        assert not any(KEY in arg for arg in command.argv) and "--api-key" not in command.argv
        options = Path(value(command.argv, "--config") or "")
        assert options.parent == tmp_path and options.suffix == ".yaml" and list(command.files) == [options]
        assert yaml.safe_load(command.files[options]) == {"api-key": KEY}
        assert command.secrets == (KEY,)
    assert not any(tmp_path.iterdir())  # the supervisor writes it (0600) when it starts the engine
    assert engine.build_command(PLANS[0], 1, KEY).files.keys() != engine.build_command(PLANS[0], 2, KEY).files.keys()


def test_tgi_keeps_the_key_off_the_command_line_and_stats_off() -> None:
    for plan, command in commands("tgi"):
        assert KEY not in command.argv and command.env == {"API_KEY": KEY}
        assert value(command.argv, "--usage-stats") == "off"
        assert value(command.argv, "--num-shard") == str(plan.tensor_parallel_size)
        assert int(value(command.argv, "--max-input-tokens") or 0) < int(value(command.argv, "--max-total-tokens") or 0)
        # The launcher refuses --dtype together with --quantize.
        assert not ("--dtype" in command.argv and "--quantize" in command.argv)
    ports = {value(TGIEngine().build_command(PLANS[0], port, KEY).argv, "--shard-uds-path") for port in (1, 2)}
    assert len(ports) == 2  # two launchers never share the shards' socket


def test_trtllm_takes_the_model_as_its_argument() -> None:
    plan = PLANS[0]
    command = TRTLLMEngine().build_command(plan, 41234, KEY)
    assert command.argv[1] == plan.model_ref
    assert value(command.argv, "--backend") == "pytorch"
    assert KEY not in command.argv  # trtllm-serve has no key option: the gateway checks keys


def test_trtllm_asks_for_its_metrics_through_an_options_file_in_the_run_dir(tmp_path: Path) -> None:
    """/prometheus/metrics exists only with return_perf_metrics, its iteration gauges only with
    enable_iter_perf_stats; `serve` takes both only from the YAML file of --extra_llm_api_options."""
    engine = TRTLLMEngine(run_dir=tmp_path)
    schema = load_schema(SCHEMAS["trtllm"])
    for plan in PLANS:
        command = engine.build_command(plan, 41234, KEY)
        assert check_command(schema, list(command.argv[1:])) == []
        options = Path(value(command.argv, "--extra_llm_api_options") or "")
        assert options.parent == tmp_path and list(command.files) == [options]
        settings = dict(line.split(": ") for line in command.files[options].splitlines())
        assert settings == {"return_perf_metrics": "true", "enable_iter_perf_stats": "true"}
    assert not any(tmp_path.iterdir())  # the adapter writes nothing: the supervisor does, when it starts the engine
    # Two engines on two ports never share one file (each removes its own when it stops).
    assert engine.build_command(PLANS[0], 1, KEY).files.keys() != engine.build_command(PLANS[0], 2, KEY).files.keys()


def test_vllm_serve_carries_the_plan_and_keeps_the_key_in_its_environment() -> None:
    for plan, command in commands("vllm"):
        assert command.argv[1] == "serve" and command.argv[2] == (plan.model_ref or str(plan.model_path))
        assert KEY not in command.argv and command.env == {"VLLM_API_KEY": KEY}
        assert value(command.argv, "--tensor-parallel-size") == str(plan.tensor_parallel_size)
        assert value(command.argv, "--max-model-len") == str(plan.context_length)
        assert "--enable-prefix-caching" in command.argv
        assert value(command.argv, "--max-num-batched-tokens") == (
            str(plan.max_num_batched_tokens) if plan.max_num_batched_tokens else None
        )
