"""The Load dialog against the real service on the bundled model, from the Models page and the chat's picker: the
saved settings with the memory the planner predicts for them against what is free, a new value re-estimated, and
"Save and load" keeping the settings and starting the model with them; the picker's Load."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.load_dialog import LoadDialog
from app.gui.main_window import MainWindow
from app.hub.library import BUNDLED_ID

READY_TIMEOUT_MS = 90_000


def _needs(dialog: LoadDialog) -> str:
    return dialog.memory_label.text()


def test_load_settings_are_shown_estimated_saved_and_used(
    qtbot: QtBot, main_window: MainWindow, tmp_path: Path
) -> None:
    window, library = main_window, main_window.library_page
    window.tabs.setCurrentWidget(library)
    qtbot.waitUntil(lambda: library.model(BUNDLED_ID) is not None, timeout=30_000)
    library.select(BUNDLED_ID)
    qtbot.waitUntil(library.load_settings_button.isEnabled)
    qtbot.mouseClick(library.load_settings_button, Qt.MouseButton.LeftButton)
    dialog = library.load_dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: dialog.answer is not None, timeout=30_000)
    assert dialog.status_label.text().startswith("The defaults")
    assert _needs(dialog).startswith("Needs about") and "RAM free" in _needs(dialog)
    default_context = dialog.spins["context"].value()
    assert default_context >= 1024
    before = _needs(dialog)
    dialog.spins["context"].setValue(512)
    qtbot.waitUntil(lambda: _needs(dialog) != before, timeout=30_000)  # the planner's estimate for 512 tokens
    dialog.grab().save(str(tmp_path / "load-dialog.png"))

    qtbot.mouseClick(dialog.load_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.status_label.text().startswith("Saved"), timeout=30_000)
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    client = window.connection.client
    assert client is not None
    record = next(m for m in client.models() if m["id"] == BUNDLED_ID)
    assert record["plan"]["context"] == 512
    assert client.model_settings(BUNDLED_ID)["settings"]["context"] == 512
    dialog.reject()

    # The chat's picker opens the same dialog, showing what was saved; "Use defaults" forgets it.
    chat = window.chat_page
    window.tabs.setCurrentWidget(chat)
    qtbot.waitUntil(lambda: chat.picker.has_model(BUNDLED_ID))
    chat.picker.select_model(BUNDLED_ID)
    assert "(running," in chat.model_combo.currentText()
    qtbot.mouseClick(chat.picker.settings_button, Qt.MouseButton.LeftButton)
    picked = chat.picker.dialog
    assert picked is not None
    qtbot.waitUntil(lambda: picked.answer is not None, timeout=30_000)
    assert picked.spins["context"].value() == 512 and picked.status_label.text() == "Saved settings."
    qtbot.mouseClick(picked.defaults_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: picked.status_label.text() == "Saved.", timeout=30_000)
    assert picked.spins["context"].value() == default_context
    assert client.model_settings(BUNDLED_ID)["saved"] is False
    picked.reject()

    # The picker's Load starts a stopped model, showing it loading until it is ready.
    client.stop_model(BUNDLED_ID)
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "stopped", timeout=30_000)
    qtbot.waitUntil(chat.picker.load_button.isEnabled)
    lines: list[str] = []
    chat.picker.sig_state_changed.connect(lambda: lines.append(chat.model_combo.currentText()))
    qtbot.mouseClick(chat.picker.load_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    assert any("(loading\N{HORIZONTAL ELLIPSIS}" in line for line in lines), lines
    assert next(m for m in client.models() if m["id"] == BUNDLED_ID)["plan"]["context"] == default_context
