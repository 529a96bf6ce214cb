"""vLLM's start-up facts against the memory model and into the calibration store (real SQLite). The start-up log is
the fixture written from vLLM 0.34.0's format strings for Qwen2.5-7B on an H200 (no GPU here)."""

from __future__ import annotations

from pathlib import Path

from app.planner.calibration import CalibrationStore
from app.planner.facts import ModelFacts
from app.planner.memory import GIB, vllm_memory
from app.planner.vllm_check import check_startup, startup_measurement
from engines.vllm_log import VLLMStartup, parse_startup

LOG = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "vllm_startup.log"
H200 = 150_754_820_096  # bytes, tests/fixtures/hardware/h200.json
# Qwen2.5-7B-Instruct's published config.json: 28 layers, 28 heads, 4 KV heads of 128, BF16 weights.
QWEN_7B = ModelFacts(
    format="safetensors", architecture="qwen2", parameters=7_615_616_512, layers=28, attention_heads=28,
    kv_heads=(4,) * 28, head_dim_k=128, head_dim_v=128, embedding_length=3584, feed_forward_length=18944,
    vocab_size=152064, trained_context=32768, weight_bytes=15_231_233_024, quantization="BF16", chat_template=True,
)  # fmt: skip


def test_startup_beside_the_prediction_and_recorded_for_calibration(tmp_path: Path) -> None:
    predicted = vllm_memory(QWEN_7B, H200, max_model_len=8192, gpu_memory_utilization=0.9)
    startup = parse_startup(LOG.read_text(encoding="utf-8").splitlines())
    check = check_startup(predicted, startup, H200, 0.9)
    assert check.measured_kv_tokens == 1_982_448 and check.measured_weights == int(14.25 * GIB)
    assert check.measured_non_kv == int(H200 * 0.9) - int(105.87 * GIB)
    assert check.predicted_kv_tokens == predicted.kv_tokens  # the log's values are made up: no accuracy claim
    assert "KV cache tokens" in check.lines()[0] and "1,982,448" in check.lines()[0]

    store = CalibrationStore(tmp_path / "calibration.sqlite")
    measurement = startup_measurement(check, predicted, architecture="qwen2", model_id="qwen-7b", context=8192)
    assert measurement is not None
    store.record(measurement)
    correction = store.correction("vllm", "qwen2")
    assert correction.samples == 1
    assert correction.vram == check.measured_non_kv - check.predicted_non_kv


def test_no_measurement_before_vllm_said_its_kv_cache() -> None:
    predicted = vllm_memory(QWEN_7B, H200, max_model_len=8192)
    check = check_startup(predicted, VLLMStartup(), H200, 0.9)
    assert check.measured_non_kv is None and check.lines()[0].endswith("vLLM ?")
    assert startup_measurement(check, predicted, architecture="qwen2", model_id="q", context=8192) is None
