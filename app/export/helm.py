"""Values for vLLM's production-stack Helm chart (https://github.com/vllm-project/production-stack, `helm/`).

The chart turns `vllmConfig` into `vllm serve` flags and passes `extraArgs` through; a plan over several nodes
becomes a KubeRay cluster (`raySpec`): a head with TP GPUs and `replicaCount` workers with TP GPUs each.
"""

from __future__ import annotations

from typing import Any

import yaml

from app.export.deployment import API_KEY_SECRET, HF_SECRET, IMAGE, Deployment

# vllmConfig keys of the chart and the vLLM flag its template writes for each.
VLLM_CONFIG_FLAGS = {
    "maxModelLen": "--max-model-len",
    "dtype": "--dtype",
    "tensorParallelSize": "--tensor-parallel-size",
    "maxNumSeqs": "--max-num-seqs",
    "gpuMemoryUtilization": "--gpu-memory-utilization",
    "enablePrefixCaching": "--enable-prefix-caching",
}
# Flags the chart sets itself: model, served name, host and port come from modelURL, name and the container port.
CHART_OWNED = {"--served-model-name", "--host", "--port"}


def values(deployment: Deployment) -> dict[str, Any]:
    plan, args = deployment.plan, deployment.serve_args()
    config: dict[str, Any] = {
        "enablePrefixCaching": True,
        "maxModelLen": plan.max_model_len,
        "dtype": plan.dtype,
        "tensorParallelSize": plan.tensor_parallel_size,
        "maxNumSeqs": plan.max_num_seqs,
        "gpuMemoryUtilization": plan.gpu_memory_utilization,
    }
    covered = set(VLLM_CONFIG_FLAGS.values()) | CHART_OWNED
    extra: list[str] = []
    flags = args[1:]  # args[0] is the model
    for index, arg in enumerate(flags):
        if not arg.startswith("--") or arg in covered:
            continue
        value = flags[index + 1] if index + 1 < len(flags) and not flags[index + 1].startswith("--") else None
        extra += [arg] if value is None else [arg, value]
    if extra:
        config["extraArgs"] = extra
    gpus = plan.tensor_parallel_size
    spec: dict[str, Any] = {
        "name": deployment.name,
        "repository": IMAGE,
        "tag": deployment.image_tag,
        "modelURL": deployment.model_ref,
        "replicaCount": 1,
        "requestCPU": 4 * gpus,
        "requestMemory": f"{16 * gpus}Gi",
        "requestGPU": gpus,
        "pvcStorage": f"{deployment.cache_gib}Gi",
        "pvcAccessMode": ["ReadWriteOnce"],
        "hf_token": {"secretName": HF_SECRET[0], "secretKey": HF_SECRET[1]},
        "vllmConfig": config,
    }
    if plan.nodes > 1:
        # The chart's RayCluster has one head and `replicaCount` workers, each asking for TP GPUs: one per stage.
        spec["replicaCount"] = plan.nodes - 1
        spec["raySpec"] = {"enabled": True, "headNode": {"requestCPU": 4 * gpus, "requestGPU": gpus,
                                                          "requestMemory": f"{16 * gpus}Gi"}}  # fmt: skip
    return {
        "servingEngineSpec": {
            "runtimeClassName": "nvidia",
            "vllmApiKey": {"secretName": API_KEY_SECRET[0], "secretKey": API_KEY_SECRET[1]},
            "modelSpec": [spec],
        }
    }


def render(deployment: Deployment) -> dict[str, str]:
    header = (
        f"# vLLM production-stack values for {deployment.model_id} ({deployment.plan.nodes} node(s) x "
        f"{deployment.plan.tensor_parallel_size} GPU(s)).\n"
        "#   helm repo add vllm https://vllm-project.github.io/production-stack\n"
        "#   helm install vllm vllm/vllm-stack -f values.yaml\n"
        f"# Secrets it reads: {API_KEY_SECRET[0]} (key {API_KEY_SECRET[1]}), {HF_SECRET[0]} (key {HF_SECRET[1]}).\n"
    )
    return {"values.yaml": header + yaml.safe_dump(values(deployment), sort_keys=False)}
