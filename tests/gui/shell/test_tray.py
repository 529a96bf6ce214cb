"""The tray menu against the real service on the bundled model: start and stop a model from it."""

from __future__ import annotations

from PySide6.QtGui import QAction
from pytestqt.qtbot import QtBot

from app.gui.shell.main_window import MainWindow
from app.gui.shell.tray import tray_tooltip
from app.hub.library import BUNDLED_ID

READY_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 30_000


def _action(window: MainWindow, name: str) -> QAction | None:
    return next((action for action in window.tray.menu.actions() if action.objectName() == name), None)


def test_tooltip_counts_states() -> None:
    assert tray_tooltip(["ready", "stopped", "ready"]) == "ModelDeck: 2 ready, 1 stopped"
    assert tray_tooltip([]) == "ModelDeck: no models"


def test_start_and_stop_a_model_from_the_tray_menu(qtbot: QtBot, main_window: MainWindow) -> None:
    window, models = main_window, main_window.item_model
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    qtbot.waitUntil(lambda: _action(window, f"start:{BUNDLED_ID}") is not None)
    start = _action(window, f"start:{BUNDLED_ID}")
    assert start is not None
    start.trigger()
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    assert "1 ready" in window.tray.tooltip()

    qtbot.waitUntil(lambda: _action(window, f"stop:{BUNDLED_ID}") is not None)
    stop = _action(window, f"stop:{BUNDLED_ID}")
    assert stop is not None
    stop.trigger()
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped", timeout=STOP_TIMEOUT_MS)
    assert [action.text() for action in window.tray.menu.actions()][-2:] == ["&Open window", "&Quit"]
