"""Model facts, the memory model and recommendations on recorded machines.

The machines are recorded hardware profiles (tests/fixtures/hardware), since none of these GPUs exists here. The
large models are described by their published architecture (config.json of Llama 3.1 8B and 70B) and the sizes
of real quantized files on the Hub; each expectation below is worked out by hand in the comment beside it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from app.hardware.profile import HardwareProfile
from app.hub.library import BUNDLED_ID
from app.planner.facts import ModelFacts, facts_from_gguf, facts_from_hf_config
from app.planner.memory import llama_cpp_memory, vllm_memory
from app.planner.plans import gguf_variant, with_command
from app.planner.recommend import Recommendation, Variant, recommend
from engines.gguf import read_gguf_info

FIXTURES = Path(__file__).parents[2] / "fixtures" / "hardware"
KV_8B = 32 * 8 * (128 + 128) * 2  # layers x KV heads x (K + V head dims) x f16 = 131072 bytes a token
KV_70B = 80 * 8 * (128 + 128) * 2  # 327680 bytes a token


def machine(name: str) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def llama(layers: int, heads: int, embd: int, ffn: int, parameters: int, fmt: str = "gguf") -> ModelFacts:
    return ModelFacts(
        format=fmt, architecture="llama", parameters=parameters, layers=layers, attention_heads=heads,
        kv_heads=(8,) * layers, head_dim_k=128, head_dim_v=128, embedding_length=embd, feed_forward_length=ffn,
        vocab_size=128256, trained_context=131072, quantization=None, weight_bytes=None, chat_template=True,
    )  # fmt: skip


LLAMA_8B = llama(32, 32, 4096, 14336, 8_030_261_248)
LLAMA_70B = llama(80, 64, 8192, 28672, 70_553_706_496)


def variants(facts: ModelFacts, sizes: dict[str, float], fmt: str = "gguf") -> list[Variant]:
    return [
        Variant(name, replace(facts, format=fmt, quantization=name, weight_bytes=int(size)), f"/models/{name}")
        for name, size in sizes.items()
    ]


# File sizes of the published GGUF conversions and safetensors checkpoints.
GGUF_8B = variants(LLAMA_8B, {"F16": 16.07e9, "Q8_0": 8.54e9, "Q6_K": 6.60e9, "Q4_K_M": 4.92e9})
GGUF_70B = variants(
    LLAMA_70B, {"Q8_0": 74.98e9, "Q6_K": 57.89e9, "Q5_K_M": 49.95e9, "Q4_K_M": 42.52e9, "IQ2_XS": 21.14e9}
)
HF_70B = variants(LLAMA_70B, {"BF16": 141.1e9, "FP8": 72.7e9, "AWQ": 39.77e9}, fmt="safetensors")


def bundled_variants(bundled_gguf: Path) -> list[Variant]:
    return [gguf_variant(bundled_gguf)]


def test_facts_of_the_bundled_gguf(bundled_gguf: Path) -> None:
    facts = facts_from_gguf(read_gguf_info(bundled_gguf))
    # SmolLM2-135M's config.json: 30 layers, 9 heads, 3 KV heads, hidden 576, intermediate 1536, vocab 49152
    assert (facts.architecture, facts.layers, facts.attention_heads) == ("llama", 30, 9)
    assert facts.kv_heads == (3,) * 30
    assert (facts.head_dim_k, facts.head_dim_v, facts.embedding_length) == (64, 64, 576)
    assert (facts.feed_forward_length, facts.vocab_size, facts.trained_context) == (1536, 49152, 8192)
    assert facts.quantization == "Q4_1" and facts.chat_template
    assert facts.parameters is not None and 130e6 < facts.parameters < 140e6
    # Q4_1 stores 32 weights in 20 bytes (5 bits each); a few f32 norms push the average a little higher
    assert facts.bits_per_weight is not None and 5.0 <= facts.bits_per_weight < 6.0
    assert facts.weight_bytes is not None and facts.weight_bytes < bundled_gguf.stat().st_size


def test_facts_from_a_hub_config_with_awq() -> None:
    config = {
        "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
        "max_position_embeddings": 131072, "torch_dtype": "float16",
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128},
    }  # fmt: skip
    # packed 4-bit weights: each I32 element holds eight of them
    facts = facts_from_hf_config(config, {"I32": 875_000_000, "F16": 1_050_000_000})
    assert facts.quantization == "AWQ" and facts.format == "safetensors"
    assert facts.parameters == 875_000_000 * 8 + 1_050_000_000
    assert facts.weight_bytes == 875_000_000 * 4 + 1_050_000_000 * 2
    assert facts.kv_bytes_per_token() == KV_8B


def test_kv_cache_and_buffers_of_the_bundled_model(bundled_gguf: Path) -> None:
    facts = facts_from_gguf(read_gguf_info(bundled_gguf))
    estimate = llama_cpp_memory(facts, 8192)
    # llama.cpp's own log for this model at n_ctx 8192 (see test_calibration): "CPU KV buffer size = 180.00 MiB"
    assert estimate.part("kv_cache").ram == 8192 * 30 * 3 * (64 + 64) * 2 == 180 << 20
    assert estimate.part("weights").ram == facts.weight_bytes
    assert estimate.vram == 0


def test_vllm_kv_capacity_on_an_h200() -> None:
    h200 = machine("h200").gpus[0]
    facts = replace(LLAMA_70B, weight_bytes=int(72.7e9))
    estimate = vllm_memory(facts, h200.memory_total, max_model_len=8192, gpu_memory_utilization=0.9)
    # 0.9 x 150.75e9 = 135.68e9; less weights 72.7e9, activations 8192 x (4 x 8192 + 2 x 28672) x 2 bytes
    # + 256 x 128256 x 4 = 1.60e9, and 1.5 GiB of non-torch memory and CUDA graphs: 59.77e9 for KV cache
    budget = 0.9 * h200.memory_total - 72.7e9 - (8192 * (4 * 8192 + 2 * 28672) * 2 + 256 * 128256 * 4) - 1.5 * 2**30
    assert estimate.kv_tokens == pytest.approx(budget / KV_70B, rel=0.001)
    assert estimate.max_concurrency == estimate.kv_tokens // 8192


def best(recommendation: Recommendation) -> tuple[str, str, str]:
    assert recommendation.best is not None, recommendation.problems
    return recommendation.best.engine, recommendation.best.variant, recommendation.best.tier


def test_8b_for_chat_on_a_4090_runs_in_16_bit_on_the_gpu() -> None:
    # F16 needs 16.07e9 weights + 8192 x 131072 = 1.07e9 KV + ~0.6e9 compute + 0.3 GiB CUDA context = 18.1e9,
    # under the 4090's 25.26e9 free less a 1.29e9 margin
    result = recommend(machine("rtx4090_24gb"), GGUF_8B, "chat")
    assert best(result) == ("llama-cpp-python", "F16", "gpu")
    assert result.best is not None and result.best.parameters["gpu_layers"] == 33
    assert result.best.context == 8192
    assert result.best.memory.part("kv_cache").vram == 8192 * KV_8B


def test_70b_for_chat_on_a_4090_offloads_part_of_a_4_bit_or_better_file() -> None:
    # Even the 42.5e9 Q4_K_M is far over 24 GB, and IQ2_XS (2.4 bits) is below the quality floor:
    # some layers go to the GPU, the rest run from the 58 GB of free RAM.
    result = recommend(machine("rtx4090_24gb"), GGUF_70B, "chat")
    engine, _, tier = best(result)
    assert (engine, tier) == ("llama-cpp-python", "partial")
    assert result.best is not None and result.best.bits_per_weight is not None and result.best.bits_per_weight >= 4
    assert 0 < result.best.parameters["gpu_layers"] < 80
    assert result.best.memory.vram <= result.budgets["gpu0"]
    assert result.best.memory.ram <= result.budgets["ram"]


def test_70b_for_eight_users_on_two_a100s_is_vllm_awq_on_one_gpu() -> None:
    # BF16 over both GPUs leaves 0.9 x 85.9e9 - 70.55e9 - 1.1e9 - 1.6e9 = 4.0e9 a GPU: about 24k tokens, short of
    # 8 users x 8192. FP8 needs compute capability 8.9 (A100 is 8.0). AWQ on one GPU leaves 34.7e9: ~106k tokens.
    result = recommend(machine("a100_80gb_x2"), HF_70B + GGUF_70B, "serve", users=8)
    assert best(result) == ("vllm", "AWQ", "gpu")
    assert result.best is not None and result.best.parameters["tensor_parallel_size"] == 1
    assert result.best.memory.kv_tokens is not None and result.best.memory.kv_tokens >= 8 * 8192
    assert any("FP8" in problem and "8.9" in problem for problem in result.problems)
    bf16 = next(option for option in result.alternatives if option.variant == "BF16")
    assert not bf16.fits and bf16.parameters["tensor_parallel_size"] == 2


def test_70b_for_eight_users_on_an_h200_is_vllm_fp8() -> None:
    # BF16's 141.1e9 exceeds 0.9 x 150.75e9 = 135.7e9; FP8 (72.7e9) leaves ~60e9 of KV cache: ~180k tokens.
    result = recommend(machine("h200"), HF_70B, "serve", users=8)
    assert best(result) == ("vllm", "FP8", "gpu")
    assert result.best is not None and result.best.parameters["max_model_len"] == 8192


def test_8b_on_an_m2_max_runs_on_metal_in_8_bit() -> None:
    # Unified memory: min(19.9e9 available, 0.75 x 34.4e9) less a 1.7e9 margin = 18.2e9;
    # Q8_0 needs 8.54e9 + 1.07e9 KV + ~1e9 buffers and runtime.
    result = recommend(machine("m2max_32gb"), GGUF_8B[1:], "chat")
    assert best(result) == ("llama-cpp-python", "Q8_0", "gpu")


def test_70b_fits_neither_the_m2_max_nor_the_laptop() -> None:
    for name in ("m2max_32gb", "laptop_8core_16gb"):
        result = recommend(machine(name), GGUF_70B, "chat")
        assert result.best is None
        assert any("Nothing fits" in problem for problem in result.problems)
        assert all(not option.fits for option in result.alternatives)


def test_long_documents_get_the_full_trained_context_on_an_h200() -> None:
    # F16 at 131072 tokens: 16.07e9 + 17.2e9 KV + ~9e9 compute, well under 142e9
    result = recommend(machine("h200"), GGUF_8B, "long-context")
    assert best(result) == ("llama-cpp-python", "F16", "gpu")
    assert result.best is not None and result.best.context == 131072


def test_bundled_model_on_the_laptop_and_on_a_4090(bundled_gguf: Path) -> None:
    laptop = recommend(machine("laptop_8core_16gb"), bundled_variants(bundled_gguf), "chat")
    assert best(laptop) == ("llama-cpp-python", "Q4_1", "cpu")
    assert laptop.best is not None and laptop.best.parameters["threads"] == 8 and laptop.best.context == 8192
    gpu = recommend(machine("rtx4090_24gb"), bundled_variants(bundled_gguf), "chat")
    assert gpu.best is not None and gpu.best.parameters["gpu_layers"] == 31


def test_the_command_line_is_the_engine_adapters(bundled_gguf: Path) -> None:
    result = recommend(machine("laptop_8core_16gb"), bundled_variants(bundled_gguf), "chat")
    assert result.best is not None
    command = with_command(BUNDLED_ID, result.best).command
    assert command[command.index("--n_ctx") + 1] == "8192"
    assert command[command.index("--n_threads") + 1] == "8"
    assert "--logits_all" in command and "<port>" in command


def test_recommend_cli_json_for_a_recorded_machine(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", "recommend", BUNDLED_ID, "--json",
         "--hardware", str(FIXTURES / "rtx4090_24gb.json")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["best"]["tier"] == "gpu"
    command = answer["best"]["command"]
    assert command[command.index("--n_gpu_layers") + 1] == "31"


def test_recommend_cli_unknown_model_says_what_exists() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", "recommend", "no-such-model"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "no-such-model" in done.stderr and BUNDLED_ID in done.stderr and "Traceback" not in done.stderr
