"""Models (the library page) against the real service on the bundled model: Load and Eject start and stop its
engine, and its state reads in the same words on Models, Home and Run."""

from __future__ import annotations

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.common.hub_format import row_key
from app.gui.common.model_item_model import STATE_COLUMN
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID

READY_TIMEOUT_MS = 60_000
STATE_COLUMN_OF_MODELS = 3  # Model, Source, Size on disk, State, File


def library_state(window: MainWindow, model_id: str) -> str | None:
    table = window.library_page.models_table
    for row in range(table.rowCount()):
        if row_key(table, row) == model_id:
            item = table.item(row, STATE_COLUMN_OF_MODELS)
            return item.text() if item is not None else None
    return None


def list_state(window: MainWindow, model_id: str) -> str:
    item_model = window.item_model
    row = item_model.model_ids().index(model_id)
    return str(item_model.data(item_model.index(row, STATE_COLUMN)))


def test_load_and_eject_on_models_in_the_words_of_every_page(qtbot: QtBot, main_window: MainWindow) -> None:
    window, page = main_window, main_window.library_page
    window.tabs.setCurrentWidget(page)
    qtbot.waitUntil(lambda: library_state(window, BUNDLED_ID) == "Not loaded", timeout=READY_TIMEOUT_MS)
    page.select(BUNDLED_ID)
    qtbot.waitUntil(page.load_button.isEnabled)
    assert not page.eject_button.isEnabled()
    assert list_state(window, BUNDLED_ID) == "Not loaded"  # Home's and Run's list: the same words

    qtbot.mouseClick(page.load_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: library_state(window, BUNDLED_ID) == "Running", timeout=READY_TIMEOUT_MS)
    assert window.item_model.state_of(BUNDLED_ID) == "ready"
    assert list_state(window, BUNDLED_ID) == "Running"
    qtbot.waitUntil(lambda: window.home_page.running_label.text() == f"Running: {BUNDLED_ID}.")
    qtbot.waitUntil(page.eject_button.isEnabled)
    assert not page.load_button.isEnabled()

    qtbot.mouseClick(page.eject_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: library_state(window, BUNDLED_ID) == "Not loaded", timeout=READY_TIMEOUT_MS)
    assert window.item_model.state_of(BUNDLED_ID) == "stopped"
    qtbot.waitUntil(page.load_button.isEnabled)
    assert not page.error_label.isVisible()
