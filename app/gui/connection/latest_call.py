"""Control calls of which only the latest one's answer is delivered, for the views that ask again."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from PySide6.QtCore import QObject

from app.client import ControlClient
from app.gui.connection.service_connection import ServiceConnection

T = TypeVar("T")


class LatestCall:
    """Control calls made for one view, of which only the latest one's answer is delivered: a page asked again
    (the user went back and chose another model) must not show the answer to its previous question, and a view
    deleted meanwhile (a dialog replaced by another) gets none."""

    def __init__(self, connection: ServiceConnection, view: QObject) -> None:
        self._connection = connection
        self._serial = 0
        view.destroyed.connect(self.cancel)

    def run(
        self, job: Callable[[ControlClient], T], on_done: Callable[[T], None], on_failed: Callable[[str], None]
    ) -> None:
        self._serial += 1
        serial = self._serial

        def done(result: T) -> None:
            if serial == self._serial:
                on_done(result)

        def failed(message: str) -> None:
            if serial == self._serial:
                on_failed(message)

        self._connection.call(job, done, failed)

    def cancel(self) -> None:
        """Drop the answer of the call in flight, if any."""
        self._serial += 1
