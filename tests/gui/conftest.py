"""Fixtures of the GUI tests: the window on a service it starts itself, on a free port, closed afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.client import default_port
from app.gui.main_window import MainWindow
from app.gui.service_connection import Phase, ServiceConnection
from app.paths import AppPaths
from tests.conftest import free_port

API_KEY = "gui-test-key"
CONNECT_TIMEOUT_MS = 40_000
CLOSE_TIMEOUT_MS = 40_000
GUI_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Qt warnings fail the GUI tests."""
    for item in items:
        if item.path.is_relative_to(GUI_TESTS):
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            # Qt's offscreen platform (the tests' display) says this of every top-level window.
            item.add_marker(pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints"))


@pytest.fixture
def endpoint_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """A free port for the service the window starts; the key it will serve with is API_KEY."""
    port = free_port()
    monkeypatch.setenv("MODELDECK_PORT", str(port))
    monkeypatch.setenv("MODELDECK_API_KEY", API_KEY)
    return port


@pytest.fixture
def main_window(qtbot: QtBot, paths: AppPaths, endpoint_port: int) -> Iterator[MainWindow]:
    """The window, shown and connected to a service it started (in this test's MODELDECK_HOME)."""
    connection = ServiceConnection(paths, default_port())
    window = MainWindow(connection)
    qtbot.addWidget(window)
    window.show()
    connection.open()
    qtbot.waitUntil(lambda: connection.is_connected or connection.phase is Phase.LOST, timeout=CONNECT_TIMEOUT_MS)
    assert connection.is_connected, window.statusBar().currentMessage()
    yield window
    # A test that failed half-way still stops the service it started, so no process is left behind.
    if not connection.is_closed:
        window.close()
        qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
