"""The real service's event stream read on a thread, for tests that watch what it publishes."""

from __future__ import annotations

import threading
from typing import Any

from app.api_types import ServiceEvent
from app.client import ControlClient


class EventRecorder:
    """Every event of `client`'s stream, or with `kind` only those of that type. `opened` is set on the first
    event: the snapshot, which the service sends once it has subscribed."""

    def __init__(self, client: ControlClient, kind: str | None = None) -> None:
        self.kind = kind
        self.events: list[ServiceEvent] = []
        self.opened = threading.Event()
        self._stream = client.events()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for event in self._stream:
            self.opened.set()
            if self.kind is None or event["type"] == self.kind:
                self.events.append(event)

    def of_type(self, kind: str) -> list[ServiceEvent]:
        return [event for event in list(self.events) if event["type"] == kind]

    def values(self, key: str) -> list[Any]:
        """What each recorded event carries under `key` (a bench or quality event's run, a build event's build)."""
        return [event[key] for event in list(self.events)]  # type: ignore[literal-required]

    def close(self) -> None:
        self._stream.close()
        self._thread.join(10)
