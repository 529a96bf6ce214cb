"""Kubernetes manifests for one node: a Deployment, its Service, and a PersistentVolumeClaim for the Hugging Face
cache. Secrets are referenced, never written: the user creates them (the header of the file says how)."""

from __future__ import annotations

from typing import Any

import yaml

from app.export.deployment import API_KEY_SECRET, CONTAINER_PORT, HF_CACHE, HF_SECRET, Deployment, ExportError


def _secret_env(name: str, secret: tuple[str, str], optional: bool) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret[0], "key": secret[1], "optional": optional}}}


def manifests(deployment: Deployment) -> list[dict[str, Any]]:
    """The objects, in the order `kubectl apply` should create them."""
    plan = deployment.plan
    if plan.nodes > 1:
        raise ExportError(
            f"this plan needs {plan.nodes} nodes (pipeline parallel {plan.nodes}); these manifests run one pod on "
            "one node: use --format helm (production-stack with KubeRay) or --format ray"
        )
    name, gpus = deployment.name, plan.tensor_parallel_size
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/managed-by": "modeldeck"}  # fmt: skip
    probe_port = CONTAINER_PORT
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{name}-hf-cache", "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": f"{deployment.cache_gib}Gi"}}},
    }
    container = {
        "name": "vllm",
        "image": deployment.image,
        "args": deployment.serve_args(),
        "ports": [{"name": "http", "containerPort": CONTAINER_PORT}],
        "env": [_secret_env("HF_TOKEN", HF_SECRET, True), _secret_env("VLLM_API_KEY", API_KEY_SECRET, False)],
        "resources": {
            "requests": {"nvidia.com/gpu": gpus, "cpu": str(4 * gpus), "memory": f"{16 * gpus}Gi"},
            "limits": {"nvidia.com/gpu": gpus},
        },
        # /health answers 200 once the model is loaded; loading a large model takes minutes.
        "startupProbe": {
            "httpGet": {"path": "/health", "port": probe_port},
            "periodSeconds": 10,
            "failureThreshold": 180,
        },
        "readinessProbe": {"httpGet": {"path": "/health", "port": probe_port}, "periodSeconds": 5},
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": probe_port},
            "periodSeconds": 15,
            "failureThreshold": 4,
        },
        "volumeMounts": [{"name": "hf-cache", "mountPath": HF_CACHE}, {"name": "shm", "mountPath": "/dev/shm"}],
    }
    pod_spec = {
        "containers": [container],
        "volumes": [
            {"name": "hf-cache", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}},
            # tensor parallel workers share tensors through /dev/shm
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        ],
    }
    return [
        claim,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "replicas": 1,
                # one pod holds the cache volume (ReadWriteOnce) and the GPUs: replace it, never run two
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "http", "port": CONTAINER_PORT, "targetPort": "http"}]},
        },
    ]


def render(deployment: Deployment) -> dict[str, str]:
    objects = manifests(deployment)
    header = (
        f"# {deployment.model_id} with vLLM {deployment.image_tag}: {deployment.plan.tensor_parallel_size} GPU(s) on "
        "one node.\n"
        "# Create the secrets it reads first (the Hugging Face token is optional, for gated models):\n"
        f"#   kubectl create secret generic {API_KEY_SECRET[0]} --from-literal={API_KEY_SECRET[1]}=<key clients send>\n"
        f"#   kubectl create secret generic {HF_SECRET[0]} --from-literal={HF_SECRET[1]}=<hf token>\n"
    )
    body = "---\n".join(yaml.safe_dump(obj, sort_keys=False) for obj in objects)
    return {"kubernetes.yaml": header + "---\n" + body}
