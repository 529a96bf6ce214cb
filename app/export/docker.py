"""One node with Docker: a Compose file (what `modeldeck export --format docker` prints, for `docker compose -f -`)
and the same as a `docker run` line; the vllm/vllm-openai image, whose entrypoint is `vllm serve`."""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from app.export.deployment import CONTAINER_PORT, HF_CACHE, Deployment, ExportError

HOST_CACHE = "$HOME/.cache/huggingface"  # expanded by the shell that runs the line


def docker_command(deployment: Deployment, host_port: int = CONTAINER_PORT) -> list[str]:
    """The `docker run` argv. HF_TOKEN and VLLM_API_KEY are passed by name (`-e NAME`): Docker copies their
    values from the calling shell, so no secret is on the command line or in the shell history."""
    plan = deployment.plan
    if plan.nodes > 1:
        raise ExportError(
            f"this plan needs {plan.nodes} nodes (pipeline parallel {plan.nodes}); one `docker run` is one node: "
            "use --format ray or --format helm"
        )
    tp = plan.tensor_parallel_size
    gpus = "all" if tp >= deployment.gpus_per_node else '"device=' + ",".join(str(i) for i in range(tp)) + '"'
    return [
        "docker", "run", "--rm", "--name", f"vllm-{deployment.name}",
        "--gpus", gpus,
        # tensor parallel workers share tensors through /dev/shm; Docker's default 64 MB is far too small
        "--ipc", "host",
        "-p", f"{host_port}:{CONTAINER_PORT}",
        "-e", "HF_TOKEN", "-e", "VLLM_API_KEY",
        "-v", f"{HOST_CACHE}:{HF_CACHE}",
        deployment.image,
        *deployment.serve_args(),
    ]  # fmt: skip


def shell_line(argv: list[str]) -> str:
    """argv quoted for a POSIX shell, leaving `$HOME` in the cache volume for the shell to expand."""
    return " ".join(f'"{arg}"' if arg.startswith("$HOME/") else shlex.quote(arg) for arg in argv)


def compose(deployment: Deployment) -> dict[str, Any]:
    """The Compose file: the `docker run` line's settings, with the GPUs as a device reservation."""
    docker_command(deployment)  # refuses a plan of several nodes, as `docker run` does
    tp = deployment.plan.tensor_parallel_size
    gpus: dict[str, Any] = (
        {"count": "all"} if tp >= deployment.gpus_per_node else {"device_ids": [str(i) for i in range(tp)]}
    )
    service = {
        "image": deployment.image,
        "command": deployment.serve_args(),
        "ports": [f"{CONTAINER_PORT}:{CONTAINER_PORT}"],
        "ipc": "host",  # tensor parallel workers share tensors through /dev/shm
        "environment": ["HF_TOKEN", "VLLM_API_KEY"],  # by name: Compose copies the values from the shell
        "volumes": [f"${{HOME}}/.cache/huggingface:{HF_CACHE}"],
        "deploy": {"resources": {"reservations": {"devices": [{"driver": "nvidia", **gpus, "capabilities": ["gpu"]}]}}},
    }
    return {"services": {f"vllm-{deployment.name}": service}}


def render(deployment: Deployment) -> dict[str, str]:
    tp = deployment.plan.tensor_parallel_size
    header = (
        f"# {deployment.model_id} with vLLM {deployment.image_tag} on one node, {tp} GPU(s); answers on port "
        f"{CONTAINER_PORT}.\n# HF_TOKEN (for gated models) and VLLM_API_KEY (what clients send) come from the shell "
        "that runs `docker compose`.\n"
    )
    compose_file = header + yaml.safe_dump(compose(deployment), sort_keys=False)
    script = (
        "#!/bin/sh\n"
        f"# {deployment.model_id} with vLLM {deployment.image_tag} on one node, {tp} GPU(s); answers on port "
        f"{CONTAINER_PORT}.\n"
        "# HF_TOKEN (for gated models) and VLLM_API_KEY (what clients send) are read from this shell's environment.\n"
        f"{shell_line(docker_command(deployment))}\n"
    )
    return {"compose.yaml": compose_file, "docker-run.sh": script}
