"""Holding back one answer of the service to the window, to put answers in the order a loaded machine gives them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from PySide6.QtCore import QCoreApplication, Qt
from pytestqt.qtbot import QtBot

from app.client import ControlClient
from app.gui.connection.service_connection import ServiceConnection

HOLD_S = 60.0


class HeldAnswer:
    """The first `ControlClient.<method>` call made from now on runs against the service as usual, then its pool
    thread waits with the answer until `deliver`, which hands it to the window's GUI thread like any answer. Nothing
    else is replaced: the service, the call and the window's handling of the answer are the real ones."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, connection: ServiceConnection, method: str) -> None:
        self.answered = threading.Event()  # the service has answered the held call
        self._release = threading.Event()
        self._handed_over = threading.Event()
        self._thread: int | None = None
        call = getattr(ControlClient, method)

        def held(client: ControlClient, *args: Any, **kwargs: Any) -> Any:
            answer = call(client, *args, **kwargs)
            if self._thread is None:
                self._thread = threading.get_ident()
                self.answered.set()
                self._release.wait(HOLD_S)
            return answer

        monkeypatch.setattr(ControlClient, method, held)
        connection.sig_call_done.connect(self._on_call_done, Qt.ConnectionType.DirectConnection)

    def _on_call_done(self, _deliver: object) -> None:  # on the thread that posts an answer to the GUI thread
        if threading.get_ident() == self._thread:
            self._handed_over.set()

    def deliver(self, qtbot: QtBot) -> None:
        """Let the held answer go, and have the GUI thread take it now."""
        self._release.set()
        qtbot.waitUntil(self._handed_over.is_set)
        QCoreApplication.sendPostedEvents()
