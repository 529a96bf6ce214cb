"""Every inference engine ModelDeck knows, scored for one model on one machine on the dimensions the field compares
engines by: throughput for the use, hardware fit, features (quantization, continuous batching, tensor parallelism,
an OpenAI-compatible API), operational complexity and ecosystem; with what each needs that the machine lacks.

Scores run 0-5 (5 best; for operations, 5 is the simplest to run). The static figures are judgements written down
once here, per engine, so that they can be argued with in one place; hardware fit and what is lacking are computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from app.hardware.profile import HardwareProfile
from engines.base import Installation

DIMENSIONS = ("throughput", "hardware_fit", "features", "operations", "ecosystem")
FEATURES = ("quantization", "continuous batching", "tensor parallelism", "OpenAI API")


@dataclass(frozen=True)
class EngineProfile:
    """What ModelDeck knows of an engine, whatever the machine."""

    name: str  # its key in engines.registry (or a name of its own when ModelDeck does not launch it)
    label: str
    formats: tuple[str, ...]  # model formats it loads: gguf, safetensors
    needs_nvidia: bool
    linux_only: bool
    features: tuple[str, ...]  # among FEATURES
    throughput_one: int  # one stream: bound by memory bandwidth for everyone, kernels make the rest
    throughput_many: int  # many concurrent users: batching and scheduling
    operations: int  # 5: nothing to install or tune; 1: builds and vendor indexes
    ecosystem: int  # models supported, releases, users
    install: str
    launched: bool = True  # False: listed for comparison, ModelDeck does not start it
    min_capability: tuple[int, int] | None = None


CATALOG: tuple[EngineProfile, ...] = (
    EngineProfile("llama-cpp-python", "llama.cpp (llama-cpp-python)", ("gguf",), False, False,
                  ("quantization", "OpenAI API"), 4, 1, 5, 5, "bundled with ModelDeck"),
    EngineProfile("llama-server", "llama.cpp server (llama-server)", ("gguf",), False, False,
                  ("quantization", "continuous batching", "OpenAI API"), 4, 3, 4, 5,
                  "`modeldeck engines build llama-server`, or llama-server on PATH"),
    EngineProfile("vllm", "vLLM", ("safetensors",), True, True, FEATURES, 4, 5, 3, 5,
                  "`modeldeck vllm-env install`", min_capability=(7, 0)),
    EngineProfile("sglang", "SGLang", ("safetensors",), True, True, FEATURES, 4, 5, 2, 4,
                  "pip install sglang (in an environment of its own)"),
    EngineProfile("tgi", "Text Generation Inference", ("safetensors",), True, True, FEATURES, 4, 4, 2, 3,
                  "TGI's container or a build from its sources"),
    EngineProfile("trtllm", "TensorRT-LLM", ("safetensors",), True, True, FEATURES, 5, 5, 1, 3,
                  "pip install tensorrt_llm --extra-index-url https://pypi.nvidia.com"),
    EngineProfile("deepspeed-mii", "DeepSpeed-MII", ("safetensors",), True, True,
                  ("quantization", "continuous batching", "tensor parallelism", "OpenAI API"), 4, 4, 2, 2,
                  "pip install deepspeed-mii", launched=False),
)  # fmt: skip


@dataclass(frozen=True)
class EngineFit:
    """One engine for this model on this machine: its scores, total, installation and what it lacks here."""

    engine: str
    label: str
    launched: bool
    installed: bool | None  # None: not checked (ModelDeck does not launch it, or has no adapter for it)
    version: str | None
    scores: dict[str, int]
    total: float
    lacks: tuple[str, ...]  # what this machine or this model lacks for it
    notes: tuple[str, ...]  # limits of the engine itself for this use
    features: tuple[str, ...]

    @property
    def usable(self) -> bool:
        """ModelDeck can launch it here for this model now."""
        return self.launched and bool(self.installed) and not self.lacks

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usable": self.usable}


def _hardware_lacks(profile: EngineProfile, hw: HardwareProfile, formats: set[str]) -> list[str]:
    lacks = []
    if profile.linux_only and hw.os and not hw.os.startswith("Linux"):
        lacks.append("runs on Linux only")
    nvidia = [gpu for gpu in hw.nvidia_gpus if not gpu.mig_enabled]
    if profile.needs_nvidia and not nvidia:
        lacks.append("needs an NVIDIA GPU")
    elif profile.min_capability and nvidia:
        best = max(gpu.compute_capability or (0, 0) for gpu in nvidia)
        if best < profile.min_capability:
            need = ".".join(map(str, profile.min_capability))
            lacks.append(f"needs compute capability {need} or newer (this GPU has {best[0]}.{best[1]})")
    if formats and not formats & set(profile.formats):
        have = " or ".join(sorted(formats))
        lacks.append(f"needs a {' or '.join(profile.formats)} model (this one is {have})")
    return lacks


def _score(profile: EngineProfile, hardware_ok: bool, users: int) -> tuple[dict[str, int], float]:
    scores = {
        "throughput": profile.throughput_many if users > 1 else profile.throughput_one,
        "hardware_fit": 5 if hardware_ok else 0,
        "features": round(5 * len(profile.features) / len(FEATURES)),
        "operations": profile.operations,
        "ecosystem": profile.ecosystem,
    }
    # Throughput counts most when serving several users, ease of running when serving one person.
    weights = {"throughput": 3 if users > 1 else 1, "features": 1, "operations": 1 if users > 1 else 2, "ecosystem": 1}
    total = sum(scores[name] * weight for name, weight in weights.items()) / sum(weights.values())
    return scores, round(total if hardware_ok else 0.0, 2)


def engine_fits(
    hw: HardwareProfile,
    formats: set[str],
    users: int,
    installations: Mapping[str, Installation],
) -> tuple[EngineFit, ...]:
    """Every known engine for a model available in `formats`, best first: runnable engines by their total, then
    the ones that cannot run here. `installations` has the detection result of each engine ModelDeck can launch."""
    fits = []
    for profile in CATALOG:
        lacks = _hardware_lacks(profile, hw, formats)
        scores, total = _score(profile, not lacks, users)
        installation = installations.get(profile.name)
        if installation is not None and not installation.installed:
            lacks.append(f"not installed: {profile.install}")
        notes = []
        if not profile.launched:
            notes.append("known to ModelDeck, not launched by it")
        if users > 1 and "continuous batching" not in profile.features:
            notes.append("serves one request at a time")
        fits.append(
            EngineFit(
                engine=profile.name,
                label=profile.label,
                launched=profile.launched,
                installed=installation.installed if installation else None,
                version=installation.version if installation else None,
                scores=scores,
                total=total,
                lacks=tuple(lacks),
                notes=tuple(notes),
                features=profile.features,
            )
        )
    return tuple(sorted(fits, key=lambda fit: (-fit.total, fit.label)))


def fit_line(fit: EngineFit) -> str:
    """One engine in a line: scores, then what it lacks here."""
    scores = " ".join(f"{name.replace('_', ' ')} {fit.scores[name]}" for name in DIMENSIONS)
    parts = [*fit.lacks, *fit.notes]
    if fit.launched and fit.installed is None:
        parts.append("installation not checked")
    if fit.usable:
        parts.insert(0, f"installed{f' ({fit.version})' if fit.version else ''}")
    return f"{fit.label:32} {fit.total:4.1f}  {scores}  {'; '.join(parts)}"
