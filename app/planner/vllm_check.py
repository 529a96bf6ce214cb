"""vLLM's start-up log checked against the memory model, and turned into a calibration measurement.

vLLM measures what the planner predicts: after loading the weights it profiles a forward pass and gives the KV
cache what is left of `gpu_memory_utilization` x the GPU's memory. So the log's KV cache bytes tell the memory
outside the KV cache it really used (weights, activations, CUDA context, graphs): that figure against the
prediction's non-KV parts is the measurement, and its error is the runtime correction the store learns
(app.planner.calibration, engine "vllm").
"""

from __future__ import annotations

from dataclasses import dataclass

from app.planner.calibration import Measurement
from app.planner.memory import MemoryEstimate
from engines.vllm_log import VLLMStartup


@dataclass(frozen=True)
class StartupCheck:
    """Predicted beside what vLLM reported, per GPU. Measured values are None where its log has not said them."""

    predicted_kv_tokens: int | None
    measured_kv_tokens: int | None
    predicted_weights: int
    measured_weights: int | None
    predicted_non_kv: int  # weights, activations and overhead the prediction puts on each GPU
    measured_non_kv: int | None  # the budget less the KV cache vLLM allocated

    def lines(self) -> list[str]:
        def mib(value: int | None) -> str:
            return "?" if value is None else f"{value / 2**20:,.0f} MiB"

        def tokens(value: int | None) -> str:
            return "?" if value is None else f"{value:,}"

        return [
            f"KV cache tokens  predicted {tokens(self.predicted_kv_tokens):>12}  "
            f"vLLM {tokens(self.measured_kv_tokens)}",
            f"weights per GPU  predicted {mib(self.predicted_weights):>12}  vLLM {mib(self.measured_weights)}",
            f"non-KV per GPU   predicted {mib(self.predicted_non_kv):>12}  vLLM {mib(self.measured_non_kv)}",
        ]


def check_startup(
    predicted: MemoryEstimate, startup: VLLMStartup, gpu_memory: int, gpu_memory_utilization: float
) -> StartupCheck:
    """The prediction for one launch beside the facts its start-up log gave."""
    budget = int(gpu_memory * gpu_memory_utilization)
    non_kv = predicted.vram - predicted.part("kv_cache").vram
    return StartupCheck(
        predicted_kv_tokens=predicted.kv_tokens,
        measured_kv_tokens=startup.kv_cache_tokens,
        predicted_weights=predicted.part("weights").vram,
        measured_weights=startup.model_load_bytes,
        predicted_non_kv=non_kv,
        measured_non_kv=budget - startup.kv_cache_bytes if startup.kv_cache_bytes is not None else None,
    )


def startup_measurement(
    check: StartupCheck, predicted: MemoryEstimate, *, architecture: str, model_id: str, context: int
) -> Measurement | None:
    """The calibration measurement a start-up gives (phase "ready", non-KV GPU memory), or None without the KV
    cache size. Host memory is not in vLLM's log: the prediction stands in for the measurement there."""
    if check.measured_non_kv is None:
        return None
    return Measurement(
        engine="vllm",
        architecture=architecture,
        model_id=model_id,
        context=context,
        gpu_layers=0,
        phase="ready",
        predicted_ram=predicted.ram_at_load,
        predicted_vram=check.predicted_non_kv,
        measured_ram=predicted.ram_at_load,
        measured_vram=check.measured_non_kv,
    )
