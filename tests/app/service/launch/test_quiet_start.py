"""An engine that may start in silence (GPU servers compiling, capturing CUDA graphs) gets its own readiness wait."""

from __future__ import annotations

from app.service.launch.lifecycle import supervisor_policy
from engines.base import GPU_SERVER_QUIET_START_S
from engines.registry import ENGINES
from engines.supervisor import SupervisorPolicy

GPU_SERVERS = ("vllm", "sglang", "tgi", "trtllm")


def test_gpu_servers_wait_longer_in_silence_than_the_policy() -> None:
    for name in GPU_SERVERS:
        policy = supervisor_policy(SupervisorPolicy(ready_timeout_s=60.0, stop_grace_s=2.0), ENGINES[name].capabilities)
        assert policy.ready_timeout_s == GPU_SERVER_QUIET_START_S == 600.0, name
        assert policy.stop_grace_s == 2.0  # the rest of the policy is kept


def test_other_engines_keep_the_policy() -> None:
    policy = SupervisorPolicy(ready_timeout_s=5.0)
    others = [name for name in ENGINES if name not in GPU_SERVERS]
    assert others  # llama.cpp's engines and external servers
    for name in others:
        assert supervisor_policy(policy, ENGINES[name].capabilities) is policy, name
    default = supervisor_policy(None, ENGINES["llama-cpp-python"].capabilities)
    assert default.ready_timeout_s == SupervisorPolicy().ready_timeout_s
