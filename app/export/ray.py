"""Multi-node `vllm serve` over Ray: `ray start` on each node, then one `vllm serve` on the head with tensor
parallelism within a node and pipeline parallelism across nodes (vLLM's documented multi-node recipe). Every
node needs the same vLLM version and the model at the same path, or access to the Hub."""

from __future__ import annotations

import shlex

from app.export.deployment import RAY_PORT, Deployment


def head_commands(deployment: Deployment) -> list[list[str]]:
    gpus = str(deployment.gpus_per_node)
    return [
        ["ray", "start", "--head", f"--port={RAY_PORT}", f"--num-gpus={gpus}"],
        ["vllm", "serve", *deployment.serve_args(ray=True)],
    ]


def worker_commands(deployment: Deployment) -> list[list[str]]:
    return [["ray", "start", '--address="$HEAD_IP:' + str(RAY_PORT) + '"', f"--num-gpus={deployment.gpus_per_node}",
             "--block"]]  # fmt: skip


def _line(argv: list[str]) -> str:
    return " ".join(arg if "$HEAD_IP" in arg else shlex.quote(arg) for arg in argv)


def render(deployment: Deployment) -> dict[str, str]:
    plan = deployment.plan
    layout = (
        f"# {deployment.model_id}: {plan.nodes} node(s) x {plan.tensor_parallel_size} GPU(s), tensor parallel "
        f"{plan.tensor_parallel_size} within a node, pipeline parallel {plan.pipeline_parallel_size} across nodes.\n"
    )
    head = (
        "#!/bin/sh\n" + layout + "# Run on the head node, after the workers have joined (`ray status` lists them).\n"
        "# HF_TOKEN and VLLM_API_KEY are read from the environment.\nset -e\n"
        + "\n".join(_line(c) for c in head_commands(deployment))
        + "\n"
    )
    files = {"ray-head.sh": head}
    if plan.nodes > 1:
        files["ray-worker.sh"] = (
            "#!/bin/sh\n" + layout + f"# Run on each of the {plan.nodes - 1} worker node(s); HEAD_IP is the head "
            "node's address.\nset -e\n: \"${HEAD_IP:?set HEAD_IP to the head node's address}\"\n"
            + "\n".join(_line(c) for c in worker_commands(deployment))
            + "\n"
        )
    return files
