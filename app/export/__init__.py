"""Deployments beyond this machine: a plan written as a `docker run` line, Kubernetes manifests, values for vLLM's
production-stack Helm chart, or multi-node `vllm serve` over Ray."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from app.export import docker, helm, kubernetes, ray
from app.export.deployment import Deployment, ExportError
from app.export.source import ExportOptions, load_deployment
from engines.atomic_files import write_atomically

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


def differing(files: dict[str, str], out_dir: Path) -> list[Path]:
    """The files already in `out_dir` whose content is not what `write` would put there (edited by hand, or from
    another export). Raises OSError."""
    return [
        out_dir / name for name, text in files.items() if (out_dir / name).exists() and not _holds(out_dir / name, text)
    ]


def write(files: dict[str, str], out_dir: Path) -> list[Path]:
    """Write the files into `out_dir` (created if missing), scripts executable; one that holds its content already
    is left as it is. Raises OSError."""
    written = []
    for name, text in files.items():
        target = out_dir / name
        if not (target.exists() and _holds(target, text)):
            write_atomically(target, text, 0o777 if name.endswith(".sh") else 0o666)
        written.append(target)
    return written


def _holds(path: Path, text: str) -> bool:
    return path.read_bytes() == text.encode("utf-8")


__all__ = ["FORMATS", "Deployment", "ExportError", "ExportOptions", "differing", "load_deployment", "render", "write"]
