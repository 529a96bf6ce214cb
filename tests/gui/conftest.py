"""Fixtures of the GUI tests: the window on a service it starts itself, on a free port, closed afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from app.client import default_port
from app.gui.common import quit_dialogs
from app.gui.common.quit_dialogs import QuitChoice
from app.gui.connection.service_connection import Phase, ServiceConnection
from app.gui.shell.main_window import MainWindow
from app.paths import AppPaths
from tests.support.service import free_port

API_KEY = "gui-test-key"
CONNECT_TIMEOUT_MS = 40_000
CLOSE_TIMEOUT_MS = 40_000
GUI_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Qt warnings fail the GUI tests."""
    for item in items:
        if item.path.is_relative_to(GUI_TESTS):
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            # Qt's offscreen platform (the tests' display) says these of every top-level window, and of raising one.
            offscreen = ("This plugin does not support propagateSizeHints", "This plugin does not support raise")
            item.add_marker(pytest.mark.qt_log_ignore(*offscreen))


@dataclass
class QuitAnswers:
    """What the quit questions answer in tests (a modal dialog would wait forever offscreen), and what was asked.

    `stop_engines` None: stop the service when the window started it and leave a service it found running,
    as closing did before the question existed."""

    close_to_tray: bool = False
    stop_engines: QuitChoice | None = None
    quit_unsaved: bool = False  # as the dialog's default: keep the window open
    asked: list[str] = field(default_factory=list)


@pytest.fixture(autouse=True)
def quit_answers(monkeypatch: pytest.MonkeyPatch) -> QuitAnswers:
    answers = QuitAnswers()

    def ask_close_to_tray(_parent: QWidget) -> bool:
        answers.asked.append("close_to_tray")
        return answers.close_to_tray

    def ask_stop_engines(parent: QWidget, _running_engines: int) -> QuitChoice:
        answers.asked.append("stop_engines")
        if answers.stop_engines is not None:
            return answers.stop_engines
        started = isinstance(parent, MainWindow) and parent.connection.started_service
        return QuitChoice.STOP if started else QuitChoice.LEAVE_RUNNING

    def ask_quit_unsaved(_parent: QWidget, _why: str) -> bool:
        answers.asked.append("quit_unsaved")
        return answers.quit_unsaved

    def ask_confirmation(_parent: QWidget, title: str, _text: str) -> bool:
        answers.asked.append(title)
        return True

    monkeypatch.setattr(quit_dialogs, "ask_close_to_tray", ask_close_to_tray)
    monkeypatch.setattr(quit_dialogs, "ask_stop_engines", ask_stop_engines)
    monkeypatch.setattr(quit_dialogs, "ask_quit_unsaved", ask_quit_unsaved)
    monkeypatch.setattr(quit_dialogs, "ask_confirmation", ask_confirmation)
    return answers


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
