"""Snippets for the selected model and "Test it" against the real service on the bundled model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.gui.run.snippets_panel import KEY_VARIABLE
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID

READY_TIMEOUT_MS = 60_000
ANSWER_TIMEOUT_MS = 60_000


def test_snippets_name_the_url_and_model_and_test_it_streams_an_answer(
    qtbot: QtBot, main_window: MainWindow, endpoint_port: int, tmp_path: Path
) -> None:
    window, models, snippets = main_window, main_window.item_model, main_window.snippets_panel
    url = f"http://127.0.0.1:{endpoint_port}/v1"
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    window.model_list_panel.select_model(BUNDLED_ID)
    qtbot.waitUntil(snippets.test_button.isEnabled)
    for language, edit in snippets.code_edits.items():
        assert url in edit.toPlainText(), language
        assert BUNDLED_ID in edit.toPlainText(), language
    snippets.code_tabs.setCurrentIndex(1)
    qtbot.mouseClick(snippets.copy_button, Qt.MouseButton.LeftButton)
    assert "from openai import OpenAI" in QGuiApplication.clipboard().text()

    qtbot.mouseClick(window.model_list_panel.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    qtbot.mouseClick(snippets.test_button, Qt.MouseButton.LeftButton)
    assert snippets.is_testing
    qtbot.waitUntil(lambda: not snippets.is_testing, timeout=ANSWER_TIMEOUT_MS)
    assert snippets.answer_label.text().strip()
    assert "TTFT" in snippets.stats_label.text() and "tokens/s" in snippets.stats_label.text()

    # Each snippet says first how to set the key, without showing it; on an explicit tick it carries the key,
    # and the copied code then runs as it is.
    key = window.endpoint_panel.key_edit.text()
    assert key and all(f"export {KEY_VARIABLE}=" in e.toPlainText() for e in snippets.code_edits.values())
    assert not any(key in e.toPlainText() for e in snippets.code_edits.values())
    window.tabs.setCurrentWidget(window.run_page)
    qtbot.waitUntil(snippets.include_key_check.isVisible)
    qtbot.mouseClick(snippets.include_key_check, Qt.MouseButton.LeftButton)
    assert all(key in e.toPlainText() for e in snippets.code_edits.values())
    snippets.code_tabs.setCurrentIndex(1)
    qtbot.mouseClick(snippets.copy_button, Qt.MouseButton.LeftButton)
    env = {k: v for k, v in os.environ.items() if k != KEY_VARIABLE}
    ran = subprocess.run([sys.executable, "-c", QGuiApplication.clipboard().text()], env=env, capture_output=True,
                         text=True, timeout=ANSWER_TIMEOUT_MS / 1000)  # fmt: skip
    assert ran.returncode == 0 and ran.stdout.strip(), ran.stderr[-2000:]
    snippets.code_tabs.setCurrentIndex(0)
    qtbot.mouseClick(snippets.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text().startswith(f"export {KEY_VARIABLE}=")
    if shutil.which("curl") and shutil.which("bash"):  # the Python snippet above ran in any case
        curl = subprocess.run(["bash", "-c", QGuiApplication.clipboard().text()], env=env, capture_output=True,
                              text=True, timeout=ANSWER_TIMEOUT_MS / 1000)  # fmt: skip
        assert curl.returncode == 0 and '"choices"' in curl.stdout, curl.stdout[-2000:] + curl.stderr[-2000:]
    window.grab().save(str(tmp_path / "run_page_snippets.png"))
