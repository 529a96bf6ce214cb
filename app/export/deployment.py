"""What an export deploys: one model served by vLLM on a cluster, and the `vllm serve` arguments it runs with.

The arguments come from the same engine adapter ModelDeck launches vLLM with on this machine
(`engines.vllm.VLLMEngine.build_command`), so the flags the exporters write are the ones its tests check against
vLLM's own command-line schema; only the listening address changes (a container listens on every interface) and the
API key stays in the environment (`VLLM_API_KEY`), never on a command line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.planner.cluster import ClusterPlan
from engines.base import LaunchPlan
from engines.vllm import VLLMEngine

VLLM_VERSION = "0.34.0"  # the version whose command-line schema the exports are tested against
IMAGE = "vllm/vllm-openai"
CONTAINER_PORT = 8000
HF_CACHE = "/root/.cache/huggingface"  # where the vllm-openai image keeps the Hugging Face cache
HF_SECRET = ("hf-token", "token")  # Kubernetes secret name and key holding the Hugging Face token
API_KEY_SECRET = ("vllm-api-key", "api-key")  # ... and the key clients must send
RAY_PORT = 6379


class ExportError(ValueError):
    """The plan cannot be written in this format; the message says why and which format would do."""


def dns_name(text: str) -> str:
    """A Kubernetes object name (DNS-1123 label) from a model id: lower case, digits and '-', at most 63."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower().rsplit("/", 1)[-1]).strip("-")[:63].strip("-")
    return name or "model"


@dataclass(frozen=True)
class Deployment:
    """One model on a cluster of identical GPU nodes."""

    model_id: str  # what clients send as `model` (vLLM's --served-model-name)
    model_ref: str  # a Hub repository (org/name) or a path the servers can read
    plan: ClusterPlan
    gpus_per_node: int
    weight_bytes: int
    image_tag: str = f"v{VLLM_VERSION}"

    @property
    def name(self) -> str:
        return dns_name(self.model_id)

    @property
    def image(self) -> str:
        return f"{IMAGE}:{self.image_tag}"

    @property
    def cache_gib(self) -> int:
        """Storage for the Hugging Face cache: the weights with room for the tokenizer, config and a re-download."""
        return max(10, math.ceil(self.weight_bytes * 1.5 / 2**30))

    def launch_plan(self, ray: bool = False) -> LaunchPlan:
        """The engine adapter's plan; `ray`: run the workers through a Ray cluster even on one node."""
        p = self.plan
        return LaunchPlan(
            model_id=self.model_id,
            model_path=Path(self.model_ref),
            context_length=p.max_model_len,
            threads=0,
            embeddings=False,
            model_ref=self.model_ref,
            tensor_parallel_size=p.tensor_parallel_size,
            pipeline_parallel_size=p.pipeline_parallel_size,
            distributed_executor_backend="ray" if ray or p.pipeline_parallel_size > 1 else None,
            gpu_memory_utilization=p.gpu_memory_utilization,
            max_num_seqs=p.max_num_seqs,
            dtype=p.dtype,
            quantization=p.quantization,
        )

    def serve_args(self, host: str = "0.0.0.0", port: int = CONTAINER_PORT, ray: bool = False) -> list[str]:
        """What follows `vllm serve`: the model, then the flags (the key comes from VLLM_API_KEY)."""
        argv = list(VLLMEngine().build_command(self.launch_plan(ray), port, "").argv)
        args = argv[argv.index("serve") + 1 :]
        return [host if previous == "--host" else arg for previous, arg in zip(["", *args], args, strict=False)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "modeldeck-deployment",
            "version": 1,
            "model_id": self.model_id,
            "model_ref": self.model_ref,
            "gpus_per_node": self.gpus_per_node,
            "weight_bytes": self.weight_bytes,
            "image": self.image,
            "plan": self.plan.to_dict(),
            "vllm_serve": ["vllm", "serve", *self.serve_args()],
        }
