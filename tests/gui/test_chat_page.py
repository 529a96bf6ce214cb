"""The chat page against the real service on the bundled model: a streamed answer, Stop, Clear, a screenshot."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.main_window import MainWindow
from app.hub.library import BUNDLED_ID

READY_TIMEOUT_MS = 60_000
ANSWER_TIMEOUT_MS = 60_000


def test_chat_streams_an_answer_and_stop_cuts_a_long_one(qtbot: QtBot, main_window: MainWindow, tmp_path: Path) -> None:
    window, models, panel = main_window, main_window.item_model, main_window.model_list_panel
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    panel.select_model(BUNDLED_ID)
    qtbot.waitUntil(panel.launch_button.isEnabled)
    qtbot.mouseClick(panel.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)

    page = window.chat_page
    # Ctrl+N opens the N-th page.
    key = Qt.Key(Qt.Key.Key_1.value + window.tabs.indexOf(page))
    qtbot.keyClick(window.tabs, key, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.tabs.currentWidget() is page)
    qtbot.waitUntil(lambda: page.model_combo.findText(BUNDLED_ID) >= 0)
    page.model_combo.setCurrentText(BUNDLED_ID)

    page.prompt_edit.setText("Say hello in one short sentence.")
    qtbot.keyClick(page.prompt_edit, Qt.Key.Key_Return)
    assert page.is_streaming
    qtbot.waitUntil(lambda: not page.is_streaming, timeout=ANSWER_TIMEOUT_MS)
    answer = page.transcript.toPlainText().split(f"{BUNDLED_ID}: ", 1)[1].strip()
    assert answer, page.transcript.toPlainText()
    assert "TTFT" in page.stats_label.text() and "tokens/s" in page.stats_label.text()
    window.grab().save(str(tmp_path / "chat_page.png"))
    assert (tmp_path / "chat_page.png").stat().st_size > 0

    # A long answer (up to 512 tokens, about ten seconds here) is cut by Stop within a moment.
    page.send("Write a very long story about a lighthouse keeper, with many chapters.")
    qtbot.waitUntil(lambda: len(page.transcript.toPlainText()) > len(answer) + 200, timeout=ANSWER_TIMEOUT_MS)
    stopped_at = time.monotonic()
    qtbot.mouseClick(page.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.is_streaming, timeout=5_000)
    assert time.monotonic() - stopped_at < 5.0
    assert page.transcript.toPlainText().rstrip().endswith("[stopped]")
    length = len(page.transcript.toPlainText())
    qtbot.wait(500)
    assert len(page.transcript.toPlainText()) == length

    qtbot.mouseClick(page.clear_button, Qt.MouseButton.LeftButton)
    assert page.transcript.toPlainText() == ""
