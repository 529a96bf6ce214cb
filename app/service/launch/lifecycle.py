"""When the service stops engines without being asked (idle TTLs, the memory cap, the waiting limit), and how long
their supervisors wait for them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from engines.base import Capabilities
from engines.supervisor import SupervisorPolicy

IDLE_CHECK_MIN_S = 0.1  # the idle check's shortest pause, however short a TTL: never a loop that does not wait


@dataclass(frozen=True)
class LifecyclePolicy:
    """When engines are stopped without being asked. None: never."""

    idle_ttl_s: float | None = None  # the default for every model
    max_loaded_bytes: int | None = None  # against the planner's predicted peak of each engine's plan
    max_waiting: int = 32  # requests waiting per engine before 429
    model_ttl_s: Mapping[str, float | None] = field(default_factory=dict)  # model id -> its own idle TTL
    max_loaded_source: str = "--max-memory"  # where max_loaded_bytes comes from (app.service.launch.memory_budget)

    def ttl_for(self, model_id: str) -> float | None:
        """The idle TTL of one model: its own if it has one, else the default."""
        return _positive_or_none(self.model_ttl_s.get(model_id, self.idle_ttl_s))

    def shortest_ttl(self) -> float | None:
        ttls = [_positive_or_none(ttl) for ttl in (self.idle_ttl_s, *self.model_ttl_s.values())]
        return min((ttl for ttl in ttls if ttl is not None), default=None)


def _positive_or_none(ttl: float | None) -> float | None:
    """A TTL of 0 or less (or NaN) keeps the engine loaded, as None does: 0 is "never" in the window's settings."""
    return ttl if ttl is not None and ttl > 0 else None


def supervisor_policy(policy: SupervisorPolicy | None, capabilities: Capabilities) -> SupervisorPolicy:
    """The supervisor's timing, waiting longer for an engine that may start in silence."""
    policy = policy or SupervisorPolicy()
    quiet = capabilities.quiet_start_s
    if quiet is not None and quiet > policy.ready_timeout_s:
        return replace(policy, ready_timeout_s=quiet)
    return policy
