"""Launch parameters a client sets for one start of a model (the wizard's recommendation, a person's choice),
checked against fixed bounds and against the model before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from app.api_types import PlanSummary
from app.bounded_json import load_json
from app.planner.defaults import DEFAULT_SLOTS, LLAMA_SERVER, default_slots, logical_cores
from engines.base import LaunchPlan

MIN_CONTEXT = 256
# Beyond these the engine either refuses to start or wastes memory for nothing: llama.cpp's prompt batch above
# 4096 only grows the compute buffer, and no model has a thousand layers to offload.
BATCH_RANGE = (32, 4096)
GPU_LAYERS_RANGE = (0, 1000)
PARALLEL_RANGE = (1, 64)
LOOKUP_RANGE = (0, 64)  # tokens prompt-lookup decoding drafts a step; 0: off
# The engines a GGUF model can be started with; which of them is installed here is the manager's to say.
GGUF_ENGINES = ("llama-cpp-python", "llama-server")


class BadOverrides(ValueError):
    """A launch parameter is malformed or out of bounds; `param` names it when there is one."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class PlanOverrides:
    """Values that replace the default plan's; None keeps the default."""

    context: int | None = None
    gpu_layers: int | None = None
    threads: int | None = None
    batch: int | None = None
    engine: str | None = None
    parallel: int | None = None  # requests served at once; only llama-server serves more than one
    draft: str | None = None  # the id of a model with the same vocabulary that drafts for this one (llama-server)
    lookup: int | None = None  # prompt-lookup decoding's tokens a step (llama-cpp-python); 0: off

    @classmethod
    def from_json(cls, body: bytes, cores: int | None = None) -> PlanOverrides | None:
        """The overrides in a request body; None for an empty body. The context's upper bound is the model's and
        is checked by `apply`."""
        if not body.strip():
            return None
        try:
            data = load_json(body)
        except ValueError:
            raise BadOverrides("The body must be a JSON object of launch parameters.") from None
        if not isinstance(data, dict):
            raise BadOverrides("The body must be a JSON object of launch parameters.")
        known = [field.name for field in fields(cls)]
        for name in data:
            if name not in known:
                raise BadOverrides(f"Unknown launch parameter {name!r}; known: {', '.join(known)}.", name)
        bounds = {
            "context": (MIN_CONTEXT, None),
            "gpu_layers": GPU_LAYERS_RANGE,
            "threads": (1, cores or logical_cores()),
            "batch": BATCH_RANGE,
            "parallel": PARALLEL_RANGE,
            "lookup": LOOKUP_RANGE,
        }
        for name, value in data.items():
            if name == "engine":
                _check_engine(value)
            elif name == "draft":
                _check_draft(value)
            else:
                _check(name, value, *bounds[name])
        engine = data.get("engine")
        if data.get("parallel") not in (None, 1) and engine != "llama-server":
            raise BadOverrides("`parallel` above 1 needs `engine` \"llama-server\": the others serve one request "
                               "at a time.", "parallel")  # fmt: skip
        return cls(**{**data, "draft": data.get("draft") or None})

    def check_speculation(self, engine: str) -> None:
        """A draft model is llama-server's way to speculate, prompt lookup llama-cpp-python's: each only there."""
        if self.draft is not None and engine != LLAMA_SERVER:
            raise BadOverrides(
                f'`draft` needs `engine` "{LLAMA_SERVER}" (a draft model is its way to decode speculatively); '
                f"{engine} offers `lookup` instead: prompt-lookup decoding, drafting from the prompt's own words.",
                "draft",
            )
        if self.lookup and engine == LLAMA_SERVER:
            raise BadOverrides(
                f"`lookup` is prompt-lookup decoding on llama-cpp-python; on {LLAMA_SERVER} give a `draft` model.",
                "lookup",
            )

    def slots(self, engine: str) -> int:
        """The requests a start with these values serves at once on `engine`."""
        return default_slots(engine, self.parallel)

    def check_context(self, trained_context: int | None, slots: int = 1) -> None:
        """The context is at most the trained context per slot: llama-server's slots share it (a unified KV
        cache), each of them using at most the trained context."""
        if self.context is None or not trained_context or self.context <= trained_context * slots:
            return
        if slots == 1:
            raise BadOverrides(
                f"`context` {self.context} is more than the {trained_context} tokens the model was trained on.",
                "context",
            )
        raise BadOverrides(
            f"`context` {self.context} is more than {slots} slots of the {trained_context} tokens the model was "
            "trained on.",
            "context",
        )

    def apply(self, plan: LaunchPlan, trained_context: int | None) -> LaunchPlan:
        """`plan` with these values in place of its own."""
        changes: dict[str, Any] = {
            "context_length": self.context,
            "gpu_layers": self.gpu_layers,
            "threads": self.threads,
            "batch_size": self.batch,
            "parallel": self.parallel or (DEFAULT_SLOTS if self.engine == LLAMA_SERVER else None),
            "lookup_tokens": self.lookup,
        }
        applied = replace(plan, **{name: value for name, value in changes.items() if value is not None})
        self.check_context(trained_context, applied.parallel)
        return applied


def _check(name: str, value: object, low: int, high: int | None) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadOverrides(f"`{name}` must be a whole number.", name)
    if value < low or (high is not None and value > high):
        span = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise BadOverrides(f"`{name}` must be {span}; got {value}.", name)


def _check_draft(value: object) -> None:
    if value is not None and (not isinstance(value, str) or len(value) > 256):
        raise BadOverrides("`draft` must be the id of a model ModelDeck knows (as in GET /api/models).", "draft")


def _check_engine(value: object) -> None:
    if value is not None and value not in GGUF_ENGINES:
        raise BadOverrides(f"`engine` must be one of {', '.join(GGUF_ENGINES)}; got {value!r}.", "engine")


def plan_summary(plan: LaunchPlan) -> PlanSummary:
    """The parameters of a plan a client can set, under the names it sets them with."""
    return {
        "context": plan.context_length,
        "gpu_layers": plan.gpu_layers,
        "threads": plan.threads,
        "batch": plan.batch_size,
        "parallel": plan.parallel,
        "draft": plan.draft_model,
        "lookup": plan.lookup_tokens,
    }
