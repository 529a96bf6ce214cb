"""From the library to the planner and back: a model's variants in, a launch plan and its exact command out."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec, known_models, model_id_from_filename
from app.paths import AppPaths
from app.planner.calibration import CalibrationStore, Correction
from app.planner.engine_choice import engine_fits
from app.planner.facts import ImplausibleConfig, facts_from_gguf, facts_from_hf_config
from app.planner.recommend import SERVE_USERS, Option, QualityLookup, Recommendation, Variant, recommend
from engines.base import Engine, Installation, LaunchPlan
from engines.gguf import MAX_DIM, read_gguf_info
from engines.registry import ENGINES

PORT_PLACEHOLDER = "<port>"  # chosen free at launch
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
MAX_SAFETENSORS_DIMS = 8


class NoVariants(ValueError):
    """The model has nothing the planner can read."""


def gguf_variant(path: Path) -> Variant:
    """A local GGUF file as a variant; raises engines.gguf.GGUFError for a file that fails the preflight."""
    facts = facts_from_gguf(read_gguf_info(path))
    return Variant(facts.quantization or "unknown", facts, str(path))


def _safetensors_counts(path: Path) -> dict[str, int]:
    """Element counts per dtype from one safetensors file's JSON header (bounded; tensor data is never read).
    Raises NoVariants for a header that is not a table of tensors with plausible shapes."""
    with path.open("rb") as stream:
        prefix = stream.read(8)
        (length,) = struct.unpack("<Q", prefix) if len(prefix) == 8 else (None,)
        if length is None or length > MAX_SAFETENSORS_HEADER:
            raise NoVariants(f"{path}: not a safetensors file, or its header claims {length} bytes")
        try:
            header = json.loads(stream.read(length))
        except (ValueError, RecursionError) as exc:
            raise NoVariants(
                f"{path}: the safetensors header is not readable JSON ({exc.__class__.__name__})"
            ) from None
    if not isinstance(header, dict):
        raise NoVariants(f"{path}: the safetensors header is not a JSON object")
    counts: dict[str, int] = {}
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = (tensor.get("dtype"), tensor.get("shape")) if isinstance(tensor, dict) else (None, None)
        if not isinstance(dtype, str) or not isinstance(shape, list) or len(shape) > MAX_SAFETENSORS_DIMS:
            raise NoVariants(f"{path}: tensor {name!r} has no dtype and shape of at most {MAX_SAFETENSORS_DIMS} dims")
        elements = 1
        for dim in shape:
            if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= MAX_DIM:
                raise NoVariants(f"{path}: tensor {name!r} has a dimension of {dim!r} (0 to {MAX_DIM})")
            elements *= dim
        counts[dtype] = counts.get(dtype, 0) + elements
    return counts


def safetensors_variant(directory: Path) -> Variant:
    """A model directory in Hugging Face layout (config.json beside *.safetensors) as a variant for vLLM."""
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested thousands of levels deep
        raise NoVariants(f"{directory}: no readable config.json ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(config, dict):
        raise NoVariants(f"{directory}: config.json is not a JSON object")
    counts: dict[str, int] = {}
    for shard in sorted(directory.glob("*.safetensors")):
        for dtype, n in _safetensors_counts(shard).items():
            counts[dtype] = counts.get(dtype, 0) + n
    try:
        facts = facts_from_hf_config(config, counts)
    except ImplausibleConfig as exc:
        raise NoVariants(f"{directory}: {exc}") from None
    return Variant(facts.quantization or "unknown", facts, str(directory))


def variants_of(spec: ModelSpec) -> list[Variant]:
    """What the planner can choose from for a library model: today one file per model."""
    if spec.path is None:
        raise NoVariants(f"{spec.id} is served by an external server; ModelDeck does not plan it")
    if spec.path.is_dir():
        return [safetensors_variant(spec.path)]
    return [gguf_variant(spec.path)]


def resolve(target: str, paths: AppPaths) -> tuple[str, list[Variant]]:
    """A library model id, a GGUF file or a model directory -> its id and variants. Raises NoVariants or GGUFError."""
    models = known_models(paths)
    if target in models:
        return target, variants_of(models[target])
    path = Path(target).expanduser()
    if path.is_file():
        return model_id_from_filename(path.name) or "model", [gguf_variant(path)]
    if path.is_dir():
        return path.name, [safetensors_variant(path)]
    known = ", ".join(models) or "none"
    raise NoVariants(f"{target!r} is neither a model ModelDeck knows ({known}) nor a GGUF file or model directory")


# The planner's engine family of a variant -> the engine whose measurements correct its predictions.
CALIBRATED_ENGINE = {"llama.cpp": "llama-cpp-python", "vllm": "vllm"}
LLAMA_SERVER = "llama-server"


def plan_model(
    hardware: HardwareProfile,
    model_id: str,
    variants: list[Variant],
    use: str,
    users: int | None,
    calibration: CalibrationStore,
    engines: Mapping[str, Engine] | None = None,
    installations: Mapping[str, Installation] | None = None,
    quality: QualityLookup | None = None,
    max_loss_pct: float | None = None,
) -> Recommendation:
    """The ranked options for a model on this hardware, corrected by earlier launches, each with its command line,
    and every known engine scored for it.

    `engines`: the engines as this machine has them (app.installs.available); `installations`: their detection
    (`detect_engines`, slow: callers keep it). llama-server is planned wherever it is installed."""
    engines = engines if engines is not None else ENGINES
    # The planner applies one correction to its llama.cpp options: that engine's, for this architecture.
    gguf = next((v for v in variants if v.engine_family == "llama.cpp"), variants[0] if variants else None)
    correction = (
        calibration.correction(CALIBRATED_ENGINE[gguf.engine_family], gguf.facts.architecture)
        if gguf
        else Correction.none()
    )
    installations = detect_engines(engines) if installations is None else installations
    # llama-server wherever it is installed: even one person's chat and a script of theirs each keep a slot.
    server = LLAMA_SERVER in installations and installations[LLAMA_SERVER].installed
    result = recommend(hardware, variants, use, users=users, correction=correction, llama_server=server,
                       quality=quality, max_loss_pct=max_loss_pct)  # fmt: skip
    return replace(
        result,
        best=with_command(model_id, result.best, engines) if result.best else None,
        alternatives=tuple(with_command(model_id, option, engines) for option in result.alternatives),
        engines=engine_fits(hardware, {v.facts.format for v in variants}, result_users(use, users), installations),
    )


def detect_engines(engines: Mapping[str, Engine]) -> dict[str, Installation]:
    """Whether each engine is installed. Slow where one is (`vllm --version` imports torch): callers keep it."""
    return {name: engine.detect() for name, engine in engines.items()}


def result_users(use: str, users: int | None) -> int:
    """The concurrent users the planner assumed for a use (app.planner.recommend.need_for)."""
    return (users or SERVE_USERS) if use == "serve" else 1


def launch_plan(model_id: str, option: Option) -> LaunchPlan:
    """The plan an option describes, ready for an engine adapter."""
    p = option.parameters
    if option.engine == "vllm":
        return LaunchPlan(
            model_id=model_id,
            model_path=Path(option.location),
            context_length=p["max_model_len"],
            threads=0,
            model_ref=option.location,
            tensor_parallel_size=p["tensor_parallel_size"],
            gpu_memory_utilization=p["gpu_memory_utilization"],
            max_num_seqs=p["max_num_seqs"],
            max_num_batched_tokens=p.get("max_num_batched_tokens"),
            dtype=p["dtype"],
            quantization=p["quantization"],
            embeddings=False,
        )
    return LaunchPlan(
        model_id=model_id,
        model_path=Path(option.location),
        context_length=p["context"],
        threads=p["threads"],
        batch_size=p["batch"],
        gpu_layers=p["gpu_layers"],
        parallel=p.get("parallel", 1),
        prompt_cache_bytes=p.get("prompt_cache", 0),
    )


def with_command(model_id: str, option: Option, engines: Mapping[str, Engine] | None = None) -> Option:
    """The option with the exact command line its plan runs (the port is picked at launch, the key is in env)."""
    command = (engines or ENGINES)[option.engine].build_command(launch_plan(model_id, option), 0, "")
    argv = tuple(
        PORT_PLACEHOLDER if prev == "--port" else arg
        for prev, arg in zip(("", *command.argv), command.argv, strict=False)
    )
    return replace(option, command=argv)
