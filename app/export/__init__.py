"""Deployments beyond this machine: a plan written as a `docker run` line, Kubernetes manifests, values for vLLM's
production-stack Helm chart, or multi-node `vllm serve` over Ray."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from app.export import docker, helm, kubernetes, ray
from app.export.deployment import Deployment, ExportError
from app.export.source import ExportOptions, load_deployment

FORMATS: dict[str, Callable[[Deployment], dict[str, str]]] = {
    "docker": docker.render,
    "k8s": kubernetes.render,
    "helm": helm.render,
    "ray": ray.render,
}


def render(deployment: Deployment, fmt: str) -> dict[str, str]:
    """File name -> content of the export, plus plan.json (which `modeldeck export` reads back as PLAN)."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    files = FORMATS[fmt](deployment)
    return {**files, "plan.json": json.dumps(deployment.to_dict(), indent=2) + "\n"}


def write(files: dict[str, str], out_dir: Path) -> list[Path]:
    """Write the files into `out_dir` (created if missing), scripts executable. Raises OSError."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        target = out_dir / name
        target.write_text(text, encoding="utf-8")
        if name.endswith(".sh"):
            target.chmod(0o755)
        written.append(target)
    return written


__all__ = ["FORMATS", "Deployment", "ExportError", "ExportOptions", "load_deployment", "render", "write"]
