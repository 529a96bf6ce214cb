"""Safetensors folder models, served by vLLM: whether this machine can (a supported NVIDIA GPU and an installed
vLLM), the plan the planner makes for them (the one `modeldeck recommend MODEL --use serve` prints), and what vLLM's
start-up log says about that plan, checked against it and recorded for calibration."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.api_types import FolderPlanRecord
from app.hardware.detector import GPUDetection
from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec
from app.installs.vllm_gpu import vllm_gpu_problem
from app.planner.budgets import Budgets
from app.planner.calibration import CalibrationStore
from app.planner.plans import NoVariants, launch_plan, plan_model, variants_of
from app.planner.recommend import Option
from app.planner.vllm_check import StartupCheck, check_startup, startup_measurement
from engines.base import Engine, Installation, LaunchPlan
from engines.vllm_log import VLLMStartup

HardwareSource = Callable[[], HardwareProfile]

# vLLM is the engine for serving several users at once; a model whose KV cache cannot hold that many full-length
# requests here is still launched for one at a time rather than refused.
USES = ("serve", "chat")
INSTALL_HINT = "install it with `modeldeck vllm-env install`, or use yours with `modeldeck vllm-env use PATH`"
GGUF_HINT = "on this machine, pull a GGUF variant of the model instead (`modeldeck pull REPO:Q4_K_M`)"


class FolderRefused(Exception):
    """The folder model cannot be launched here; the message says what is missing and how to get it."""


def overrides_refusal(model_id: str) -> str:
    return (
        f"{model_id} is a safetensors model served by vLLM: its launch parameters come from the planner "
        f"(`modeldeck recommend {model_id} --use serve` shows them); launch overrides apply to GGUF models only."
    )


@dataclass(frozen=True)
class FolderLaunch:
    """The planner's vLLM option for a folder model and the plan it gives, for a GPU of `gpu_memory` bytes."""

    option: Option
    plan: LaunchPlan
    gpu_memory: int
    architecture: str

    @property
    def footprint(self) -> int:
        """Predicted peak memory: host memory and every GPU's share (against --max-memory)."""
        memory = self.option.memory
        return memory.ram + memory.vram * max(1, memory.gpus)

    def capacity(self, startup: VLLMStartup | None) -> int:
        """Requests the gateway lets through at once: the plan's max sequences (the predicted KV cache
        concurrency), narrowed to the concurrency vLLM reports for full-length requests once it has said it."""
        planned = self.plan.max_num_seqs or 1
        if startup is None or startup.max_concurrency is None:
            return planned
        return max(1, min(planned, int(startup.max_concurrency)))

    def check(self, startup: VLLMStartup) -> StartupCheck:
        utilization = self.plan.gpu_memory_utilization or 0.9  # vLLM's default
        return check_startup(self.option.memory, startup, self.gpu_memory, utilization)

    def describe(self, startup: VLLMStartup | None) -> FolderPlanRecord:
        """The plan's vLLM figures, its reasons, and once vLLM has said its own, both side by side."""
        memory = self.option.memory
        return {
            "parameters": self.option.parameters,
            "predicted_kv_cache_tokens": memory.kv_tokens,
            "predicted_max_concurrency": memory.max_concurrency,
            "reasons": list(self.option.reasons),
            "check": self.check(startup).lines() if startup is not None else [],
        }


def _missing(installation: Installation, hardware: HardwareProfile) -> list[str]:
    """What this machine lacks for vLLM, each with what to do about it."""
    missing = []
    gpu_problem = vllm_gpu_problem(GPUDetection(gpus=hardware.gpus, problems=hardware.gpu_problems))
    if gpu_problem is not None:
        missing.append(f"{gpu_problem}; {GGUF_HINT}")
    if not installation.installed:
        missing.append(f"{installation.detail}; {INSTALL_HINT}")
    return missing


def plan_folder(spec: ModelSpec, engine: Engine, hardware: HardwareProfile, store: CalibrationStore) -> FolderLaunch:
    """The vLLM launch of a folder model on this hardware; FolderRefused when it cannot be made. Blocking: it runs
    `vllm --version` and reads the model's headers."""
    installation = engine.detect()
    missing = _missing(installation, hardware)
    if missing:
        raise FolderRefused(
            f"{spec.id} is a safetensors model for vLLM, which cannot start here: {'. '.join(missing)}."
        )
    try:
        variants = variants_of(spec)
    except NoVariants as exc:
        raise FolderRefused(f"{spec.id} cannot be planned: {exc}") from exc
    engines, installations = {engine.name: engine}, {engine.name: installation}
    problems: list[str] = []
    for use in USES:
        result = plan_model(hardware, spec.id, variants, use, None, store, engines, installations)
        options = [o for o in (result.best, *result.alternatives) if o is not None and o.engine == engine.name]
        if options and options[0].fits:
            return FolderLaunch(
                option=options[0],
                plan=launch_plan(spec.id, options[0]),
                gpu_memory=Budgets.of(hardware).gpus[0].memory_total,
                architecture=variants[0].facts.architecture or "unknown",
            )
        # The option's reasons say where it falls short (its KV cache); without one, the planner's problems say why.
        problems = list(options[0].reasons if options else result.problems)
    raise FolderRefused(f"{spec.id} has no vLLM plan that fits this machine: {'; '.join(problems)}")


def record_startup(store: CalibrationStore, model_id: str, launch: FolderLaunch, startup: VLLMStartup) -> bool:
    """Record what the start-up log measured against the plan's prediction; False while the log has not said the
    KV cache memory yet."""
    measurement = startup_measurement(
        launch.check(startup),
        launch.option.memory,
        architecture=launch.architecture,
        model_id=model_id,
        context=launch.plan.context_length,
    )
    if measurement is None:
        return False
    store.record(measurement)
    return True


__all__ = ["FolderLaunch", "FolderRefused", "HardwareSource", "overrides_refusal", "plan_folder", "record_startup"]
