"""Plans for machines beyond this one: vLLM on a cluster of identical GPU nodes.

Tensor parallelism splits every layer across the GPUs of one node (it needs their fast interconnect); pipeline
parallelism splits the layers across nodes. A model that does not fit one GPU gets tensor parallelism first, up to
every GPU of a node; one that does not fit a node gets one pipeline stage per node. Each GPU then holds
1 / (TP x PP) of the weights and of the KV cache per token, which is what `vllm_memory` models with
`tensor_parallel = TP x PP` (activations of one layer are not split by pipeline stages, which this slightly
overstates as split: a stage computes its layers for the whole batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.hardware.profile import HardwareProfile
from app.planner.facts import ModelFacts
from app.planner.memory import GIB, MissingFacts, vllm_memory
from app.planner.recommend import need_for

DEFAULT_UTILIZATION = 0.9
MAX_GPUS_PER_NODE = 16
MAX_NODES = 64


class ClusterPlanError(ValueError):
    """The model cannot be planned on this cluster; the message says why and what would help."""


@dataclass(frozen=True)
class ClusterTarget:
    """Identical nodes of identical NVIDIA GPUs."""

    gpu_memory: int  # bytes per GPU
    gpus_per_node: int = 1
    max_nodes: int = 1
    compute_capability: tuple[int, int] = (8, 0)

    def __post_init__(self) -> None:
        if self.gpu_memory < 4 * GIB:
            raise ClusterPlanError(f"a GPU with {self.gpu_memory / GIB:.1f} GiB is too small for vLLM")
        if not 1 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            raise ClusterPlanError(f"GPUs per node must be 1 to {MAX_GPUS_PER_NODE}, not {self.gpus_per_node}")
        if not 1 <= self.max_nodes <= MAX_NODES:
            raise ClusterPlanError(f"nodes must be 1 to {MAX_NODES}, not {self.max_nodes}")


def target_from_profile(profile: HardwareProfile, nodes: int) -> ClusterTarget:
    """A cluster of `nodes` machines like the recorded one (`modeldeck hw --json`): its NVIDIA GPUs, not MIG."""
    gpus = [gpu for gpu in profile.nvidia_gpus if not gpu.mig_enabled]
    if not gpus:
        raise ClusterPlanError("the hardware profile has no usable NVIDIA GPU; vLLM needs one")
    smallest = min(gpus, key=lambda gpu: gpu.memory_total)  # tensor parallel shards are equal: the smallest rules
    return ClusterTarget(smallest.memory_total, len(gpus), nodes, smallest.compute_capability or (8, 0))


@dataclass(frozen=True)
class ClusterPlan:
    """How to run one model with vLLM on the target: TP within a node, PP across nodes."""

    tensor_parallel_size: int
    pipeline_parallel_size: int  # = nodes used
    max_model_len: int
    max_num_seqs: int
    gpu_memory_utilization: float
    dtype: str
    quantization: str | None
    kv_cache_tokens: int
    weights_per_gpu_bytes: int
    reasons: tuple[str, ...]

    @property
    def nodes(self) -> int:
        return self.pipeline_parallel_size

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "nodes": self.nodes,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "kv_cache_tokens": self.kv_cache_tokens,
            "weights_per_gpu_bytes": self.weights_per_gpu_bytes,
            "reasons": list(self.reasons),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterPlan:
        """A plan saved with `to_dict`; raises KeyError, TypeError or ClusterPlanError for one that is not."""
        tp, pp = int(data["tensor_parallel_size"]), int(data["pipeline_parallel_size"])
        utilization = float(data["gpu_memory_utilization"])
        if not (1 <= tp <= 16 and 1 <= pp <= 64 and 0 < utilization <= 1 and int(data["max_model_len"]) >= 1):
            raise ClusterPlanError(f"the saved plan has values out of range: TP {tp}, PP {pp}, "
                                   f"utilization {utilization}")  # fmt: skip
        quantization = data.get("quantization")
        return cls(
            tp, pp, int(data["max_model_len"]), int(data["max_num_seqs"]), utilization, str(data["dtype"]),
            str(quantization) if quantization else None, int(data.get("kv_cache_tokens") or 0),
            int(data.get("weights_per_gpu_bytes") or 0), tuple(str(r) for r in data.get("reasons", ())),
        )  # fmt: skip


def _layouts(target: ClusterTarget, layers: int | None) -> list[tuple[int, int]]:
    """(TP, PP) to try, cheapest first: TP over powers of two up to a node, then one more node at a time."""
    tps = [tp for tp in (1, 2, 4, 8, 16) if tp <= target.gpus_per_node]
    if target.gpus_per_node not in tps:
        tps.append(target.gpus_per_node)
    widest = tps[-1]
    pps = [pp for pp in range(2, target.max_nodes + 1) if layers is None or pp <= layers]
    return [(tp, 1) for tp in tps] + [(widest, pp) for pp in pps]


def plan_cluster(facts: ModelFacts, target: ClusterTarget, use: str = "serve", users: int | None = None,
                 max_model_len: int | None = None) -> ClusterPlan:  # fmt: skip
    """The smallest TP x PP layout whose KV cache holds every user's full context at once.

    Raises ClusterPlanError when even every GPU of every node is not enough, or the model's facts are missing.
    """
    if facts.format != "safetensors":
        raise ClusterPlanError(
            "export deploys vLLM, which serves Hugging Face models (safetensors): use a Hub repository or a model "
            f"folder, not a {facts.format.upper()} file"
        )
    need = need_for(use, facts.trained_context, users)
    length = max_model_len or need.context
    if facts.trained_context and length > facts.trained_context:
        raise ClusterPlanError(f"max model length {length} is over the model's trained context {facts.trained_context}")
    quantization = facts.quantization.lower() if facts.quantization in ("AWQ", "GPTQ", "FP8") else None
    if quantization == "fp8" and target.compute_capability < (8, 9):
        raise ClusterPlanError("FP8 weights need Ada or Hopper GPUs (compute capability 8.9+)")
    dtype = "bfloat16" if target.compute_capability >= (8, 0) else "float16"
    memory = None
    try:
        for tp, pp in _layouts(target, facts.layers):
            memory = vllm_memory(facts, target.gpu_memory, max_model_len=length,
                                 gpu_memory_utilization=DEFAULT_UTILIZATION, tensor_parallel=tp * pp)  # fmt: skip
            if (memory.kv_tokens or 0) >= length * need.users:
                break
        else:
            gpus = target.gpus_per_node * target.max_nodes
            raise ClusterPlanError(
                f"{need.users} users at {length} tokens do not fit on {target.max_nodes} node(s) of "
                f"{target.gpus_per_node} GPU(s) of {target.gpu_memory / GIB:.0f} GiB ({gpus} GPUs): allow more nodes, "
                "fewer users or a shorter context, or a quantized variant"
            )
    except MissingFacts as exc:
        raise ClusterPlanError(str(exc)) from exc
    concurrency = memory.max_concurrency or 1
    reasons = (
        f"tensor parallel {tp}: "
        + ("one GPU holds a stage" if tp == 1 else f"each layer split over {tp} GPUs of one node"),
        f"pipeline parallel {pp}: " + ("one node" if pp == 1 else f"the layers split over {pp} nodes, one stage each"),
        f"max model length {length}: " + ("as asked" if max_model_len else f"what the use {use!r} asks for"),
        f"KV cache {memory.kv_tokens} tokens: {concurrency} requests of {length} tokens at once "
        f"({need.users} users asked for)",
        f"gpu memory utilization {DEFAULT_UTILIZATION}: vLLM's default, the GPUs being the engine's alone",
    )
    return ClusterPlan(tp, pp, length, max(1, min(256, concurrency)), DEFAULT_UTILIZATION, dtype, quantization,
                       memory.kv_tokens or 0, memory.part("weights").vram, reasons)  # fmt: skip
