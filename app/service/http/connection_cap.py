"""How many connections the service's listeners keep open, from how many files the process may open.

Every client connection holds a descriptor, and a proxied one a second one to the engine; a client that opens
thousands of keep-alive connections and leaves them idle (a 401 keeps the connection) would otherwise run the
service out of descriptors, and then nothing is accepted, not even the engines' output. So the soft limit is raised
to the hard one at start, and each listener keeps at most its cap of connections: at the cap the connection idle
the longest is closed for a new one, and when none is idle the new one is answered 503 and closed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("modeldeck.service")

RESERVED_FDS = 64  # databases, logs, engine pipes, listeners, the Hub client: what is not a client connection
MAX_GATEWAY_CONNECTIONS = 4096
MAX_CONTROL_CONNECTIONS = 256
MIN_CONNECTIONS = 8


def raise_open_file_limit() -> int | None:
    """Raise the soft limit on open files to the hard one; the limit now in force (None where there is none)."""
    try:
        import resource
    except ImportError:  # Windows: no such limit to raise
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:  # macOS refuses values above OPEN_MAX
            log.warning("could not raise the open-file limit from %s to %s: %s", soft, hard, exc)
    return None if soft == resource.RLIM_INFINITY else soft


@dataclass(frozen=True)
class ConnectionCaps:
    gateway: int
    control: int


def connection_caps(open_files: int | None, gateway_override: int | None = None) -> ConnectionCaps:
    """Caps that fit in `open_files` descriptors: the gateway's connections count twice (client and engine)."""
    spare = MAX_GATEWAY_CONNECTIONS * 3 if open_files is None else max(0, open_files - RESERVED_FDS)
    gateway = max(MIN_CONNECTIONS, min(MAX_GATEWAY_CONNECTIONS, spare // 3))
    control = max(MIN_CONNECTIONS, min(MAX_CONTROL_CONNECTIONS, spare // 6))
    return ConnectionCaps(gateway_override or gateway, control)


class Evictable(Protocol):
    """A connection as the cap sees it: since when it has been idle (None: busy), and how to close it."""

    idle_since: float | None

    def close(self) -> None: ...


def make_room(connections: Collection[Evictable], cap: int, newcomer: Evictable) -> Evictable | None:
    """With `newcomer` counted, close the connection idle the longest if over `cap`. Returns the closed one, or
    None when there was room; raises NoRoom when every other connection is busy."""
    if len(connections) < cap:  # the common case, without a scan (the newcomer may be counted in already)
        return None
    others = [c for c in connections if c is not newcomer]
    if len(others) < cap:
        return None
    idle = [c for c in others if c.idle_since is not None]
    if not idle:
        raise NoRoom
    victim = min(idle, key=_idle_since)
    victim.idle_since = None
    victim.close()
    return victim


def _idle_since(connection: Evictable) -> float:
    return connection.idle_since if connection.idle_since is not None else time.monotonic()


class NoRoom(Exception):
    """Every connection is busy and the listener is at its cap."""


def busy_answer(body: bytes) -> bytes:
    """A 503 written to a connection refused at the cap, before it is closed."""
    return (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\nretry-after: 1\r\n\r\n%b" % (len(body), body)
    )
