"""Reading macOS `sysctl` values: one read-only subprocess with a timeout, and a parser testable anywhere."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping

log = logging.getLogger("modeldeck.hardware")

SYSCTL_TIMEOUT_S = 2.0


def parse_sysctl(text: str) -> dict[str, str]:
    """`name: value` lines as `sysctl NAME...` prints them (names contain dots, values may contain spaces)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        name, separator, value = line.partition(": ")
        if separator and name.strip():
            values[name.strip()] = value.strip()
    return values


def read_sysctl(*names: str) -> dict[str, str]:
    """The values of these sysctl names (a name may be a prefix such as `hw.optional`); absent ones are left out.

    sysctl prints the names it knows and complains on stderr about the others, with a failing status: the
    output is parsed whatever the status, so one unknown name does not hide the rest.
    """
    try:
        result = subprocess.run(
            ["sysctl", *names], capture_output=True, text=True, timeout=SYSCTL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("sysctl %s failed: %s", " ".join(names), exc)
        return {}
    return parse_sysctl(result.stdout)


def sysctl_int(values: Mapping[str, str], name: str) -> int | None:
    """An integer sysctl value, or None when it is absent or not a number."""
    try:
        return int(values[name])
    except (KeyError, ValueError):
        return None
