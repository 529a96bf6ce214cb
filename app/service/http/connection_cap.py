"""How many connections the service's listeners keep open, from how many files the process may open.

Every client connection holds a descriptor, and a proxied one a second one to the engine; a client that opens
thousands of keep-alive connections and leaves them idle (a 401 keeps the connection) would otherwise run the
service out of descriptors, and then nothing is accepted, not even the engines' output. So the soft limit is raised
to the hard one at start, and each listener keeps at most its cap of connections (ConnectionTable: who makes room
for a newcomer). A connection refused at the cap is answered 503 and closed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

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


class Tracked(Protocol):
    """A connection as the table sees it: the address it comes from, and how to close it."""

    @property
    def client_host(self) -> str | None: ...

    def close(self) -> None: ...


T = TypeVar("T", bound=Tracked)


class ConnectionTable(Generic[T]):
    """The open connections of one listener, each waiting for a request's headers, busy, or idle.

    At the cap a newcomer takes the place of, in this order: the connection waiting the longest for its headers (a
    client that connects and trickles headers, or sends nothing, holds a descriptor without having asked for
    anything), the longest idle one whose last answer was a 401 or 403, the longest idle one. Busy connections (a
    request being received or answered) are never closed for a newcomer: when all are busy it is refused. One client
    address may keep at most `per_client` connections waiting for headers; past that its own oldest waiting one is
    closed, so that one address cannot fill the cap with half-sent requests. Each dict keeps insertion order, oldest
    first: choosing whom to close is O(1).
    """

    def __init__(self, cap: int, per_client: int | None = None) -> None:
        self.cap = cap
        self.per_client = per_client if per_client is not None else max(MIN_CONNECTIONS, cap // 2)
        self._open: set[T] = set()
        self._waiting: dict[T, None] = {}  # for a request's headers
        self._waiting_by_client: dict[str, dict[T, None]] = {}
        self._idle_refused: dict[T, None] = {}  # idle after a 401 or 403
        self._idle: dict[T, None] = {}

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._open))

    def admit(self, connection: T) -> bool:
        """Count a new connection in, waiting for its first request; False when every other one is busy at the cap
        (the caller refuses it). At the cap the first in line is closed for it."""
        if len(self._open) >= self.cap:
            victim = next(iter(self._waiting or self._idle_refused or self._idle), None)
            if victim is None:
                return False
            self._close(victim)
        self._open.add(connection)
        self.waiting(connection)
        return True

    def waiting(self, connection: T) -> None:
        """`connection` waits for a request's headers (connected, or a request begun after an idle spell)."""
        self._idle.pop(connection, None)
        self._idle_refused.pop(connection, None)
        self._waiting[connection] = None
        host = connection.client_host
        if host is not None:
            mine = self._waiting_by_client.setdefault(host, {})
            mine[connection] = None
            if len(mine) > self.per_client:
                self._close(next(iter(mine)))

    def busy(self, connection: T) -> None:
        """A request's headers are in: `connection` is receiving or answering it."""
        self._not_waiting(connection)
        self._idle.pop(connection, None)
        self._idle_refused.pop(connection, None)

    def idle(self, connection: T, refused: bool) -> None:
        """`connection` answered its last request (with a 401 or 403 if `refused`) and waits for another."""
        self._not_waiting(connection)
        (self._idle_refused if refused else self._idle)[connection] = None

    def discard(self, connection: T) -> None:
        """`connection` is closed."""
        self.busy(connection)
        self._open.discard(connection)

    def _not_waiting(self, connection: T) -> None:
        if connection not in self._waiting:
            return
        del self._waiting[connection]
        mine = self._waiting_by_client.get(connection.client_host or "")
        if mine is not None:
            mine.pop(connection, None)
            if not mine:
                del self._waiting_by_client[connection.client_host or ""]

    def _close(self, connection: T) -> None:
        self.discard(connection)  # its descriptor is released as it closes
        connection.close()


def busy_answer(body: bytes) -> bytes:
    """A 503 written to a connection refused at the cap, before it is closed."""
    return (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\nretry-after: 1\r\n\r\n%b" % (len(body), body)
    )
