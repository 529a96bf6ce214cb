"""PLAN -> Deployment: a saved plan (JSON), a library model or model folder, or a Hugging Face Hub repository,
planned for the cluster the user describes."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.bounded_json import BadJson, load_json
from app.export.deployment import VLLM_VERSION, Deployment, ExportError
from app.paths import AppPaths
from app.planner.cluster import ClusterPlan, ClusterPlanError, ClusterTarget, plan_cluster
from app.planner.facts import ImplausibleConfig, ModelFacts, facts_from_hf_config
from app.planner.plans import NoVariants, resolve
from engines.gguf import GGUFError

_HUB_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


@dataclass(frozen=True)
class ExportOptions:
    """The cluster and what it serves: planner options of `modeldeck export`."""

    target: ClusterTarget
    use: str = "serve"
    users: int | None = None
    max_model_len: int | None = None
    served_name: str | None = None
    image_tag: str = f"v{VLLM_VERSION}"


def is_hub_repo(text: str) -> bool:
    return bool(_HUB_REPO.match(text)) and not Path(text).expanduser().exists()


def hub_facts(repo_id: str, *, endpoint: str, token: str | None) -> ModelFacts:
    """A Hub model's facts from its config.json and its safetensors headers (read with Range requests; no weights
    are downloaded). Raises app.hub.errors.HubError with the reason (offline, gated, not found)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import NotASafetensorsRepoError

    from app.hub.errors import translate
    from app.hub.hub_api import _api, ensure_reachable

    ensure_reachable(endpoint)
    try:
        metadata = _api(endpoint, token).get_safetensors_metadata(repo_id)
        # into a folder of its own: planning an export must not leave files in the user's Hugging Face cache
        with tempfile.TemporaryDirectory(prefix="modeldeck-export-") as folder:
            config_path = hf_hub_download(repo_id, "config.json", endpoint=endpoint, token=token or False,
                                          cache_dir=folder)  # fmt: skip
            raw_config = Path(config_path).read_bytes()
    except NotASafetensorsRepoError as exc:
        raise ExportError(
            f"{repo_id} has no safetensors weights; export deploys vLLM, which serves Hugging Face models in "
            "safetensors"
        ) from exc
    except Exception as exc:  # huggingface_hub's error zoo; translate() names each case or re-raises
        raise translate(exc, endpoint, repo_id, token is not None) from exc
    try:
        config = load_json(raw_config)
    except BadJson as exc:
        raise ExportError(f"{repo_id}: config.json is not readable JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ExportError(f"{repo_id}: config.json is not a JSON object")
    counts: dict[str, int] = {str(dtype): int(n) for dtype, n in metadata.parameter_count.items()}
    try:
        return facts_from_hf_config(config, counts)
    except ImplausibleConfig as exc:
        raise ExportError(f"{repo_id}: {exc}") from None


def _from_saved(data: dict[str, Any], options: ExportOptions) -> Deployment:
    """A plan written by `modeldeck export` (plan.json) or printed by `modeldeck recommend --json`."""
    if data.get("kind") == "modeldeck-deployment":
        return Deployment(
            model_id=options.served_name or str(data["model_id"]),
            model_ref=str(data["model_ref"]),
            plan=ClusterPlan.from_dict(data["plan"]),
            gpus_per_node=int(data["gpus_per_node"]),
            weight_bytes=int(data["weight_bytes"]),
            image_tag=options.image_tag,
        )
    if "best" in data and "alternatives" in data:
        candidates = [o for o in [data["best"], *data["alternatives"]] if o and o.get("engine") == "vllm"]
        if not candidates:
            raise ExportError(
                "the recommendation has no vLLM option (vLLM needs a safetensors model and an NVIDIA GPU); export "
                "deploys vLLM: export the model itself with --gpu-memory and --gpus-per-node instead"
            )
        option, p = candidates[0], candidates[0]["parameters"]
        weights = next(part for part in option["memory"]["parts"] if part["name"] == "weights")
        plan = ClusterPlan.from_dict({**p, "pipeline_parallel_size": 1, "kv_cache_tokens": option["memory"]
                                      .get("kv_tokens"), "reasons": option.get("reasons", ())})  # fmt: skip
        return Deployment(
            model_id=options.served_name or str(data.get("model") or Path(option["location"]).name),
            model_ref=str(option["location"]),
            plan=plan,
            gpus_per_node=max(options.target.gpus_per_node, plan.tensor_parallel_size),
            weight_bytes=int(weights["vram"]) * plan.tensor_parallel_size,
            image_tag=options.image_tag,
        )
    raise ExportError("this JSON file is neither a plan written by `modeldeck export` nor `modeldeck recommend --json`")


def load_deployment(target: str, options: ExportOptions, paths: AppPaths, *, endpoint: str = "",
                    token: str | None = None) -> Deployment:  # fmt: skip
    """The deployment PLAN describes. Raises ExportError, ClusterPlanError, NoVariants, GGUFError or HubError."""
    path = Path(target).expanduser()
    if path.suffix == ".json" and path.is_file():
        try:
            data = load_json(path.read_bytes())
            if not isinstance(data, dict):
                raise ExportError(f"{path}: a plan is a JSON object")
            return _from_saved(data, options)
        except (OSError, ValueError, KeyError, TypeError, StopIteration) as exc:
            if isinstance(exc, ExportError | ClusterPlanError):
                raise
            what = str(exc) if isinstance(exc, BadJson) else f"{type(exc).__name__}: {exc}"
            raise ExportError(f"{path}: not a readable plan ({what})") from exc
    if is_hub_repo(target) and target not in _library_ids(paths):
        facts, model_id, ref = hub_facts(target, endpoint=endpoint, token=token), target.split("/")[1], target
    else:
        try:
            model_id, variants = resolve(target, paths)
        except (NoVariants, GGUFError) as exc:
            raise ExportError(str(exc)) from exc
        variant = next((v for v in variants if v.facts.format == "safetensors"), variants[0])
        facts, ref = variant.facts, variant.location
    plan = plan_cluster(facts, options.target, options.use, options.users, options.max_model_len)
    return Deployment(
        model_id=options.served_name or model_id,
        model_ref=ref,
        plan=plan,
        gpus_per_node=options.target.gpus_per_node,
        weight_bytes=facts.weight_bytes or 0,
        image_tag=options.image_tag,
    )


def _library_ids(paths: AppPaths) -> set[str]:
    from app.hub.library import known_models

    return set(known_models(paths))
