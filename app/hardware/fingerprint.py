"""The facts of a hardware profile that decide speed, hashed: how benchmark and quality cards are matched by machine."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def hardware_fingerprint(hardware: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of a hardware profile that decide speed, and a short hash of them to match cards by machine."""
    cpu = hardware.get("cpu") or {}
    facts = {
        "cpu": cpu.get("model"),
        "logical_cores": cpu.get("logical_cores"),
        "physical_cores": cpu.get("physical_cores"),
        "ram_total": hardware.get("ram_total"),
        "gpus": [{"name": g.get("name"), "memory_total": g.get("memory_total")} for g in hardware.get("gpus", [])],
        "driver_version": hardware.get("driver_version"),
        "cuda_version": hardware.get("cuda_version"),
        "os": hardware.get("os"),
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    return {"id": digest, **facts}
