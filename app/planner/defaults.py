"""The first planner: a CPU plan with sound defaults. The memory model and GPU fitting come later."""

from __future__ import annotations

import os

import psutil

from engines.base import LaunchPlan
from engines.gguf import GGUFInfo

DEFAULT_CONTEXT = 4096


def physical_cores() -> int:
    """Physical cores, falling back to logical ones where the count is unknown.

    llama-cpp-python defaults to half the logical CPUs: on a 2-core machine that is one thread.
    """
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def default_plan(model_id: str, info: GGUFInfo) -> LaunchPlan:
    """A plan for serving a GGUF model on the CPU."""
    trained = info.context_length
    context = min(DEFAULT_CONTEXT, trained) if trained else DEFAULT_CONTEXT
    return LaunchPlan(
        model_id=model_id,
        model_path=info.path,
        context_length=context,
        threads=physical_cores(),
        batch_size=512,
        gpu_layers=0,
    )
