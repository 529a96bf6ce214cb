"""A hint the user hides stays hidden in later runs (the window's GuiState file), until it says something new; the
endpoint panel's note about where the API key is kept is such a hint."""

from __future__ import annotations

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.common.endpoint_panel import EndpointPanel
from app.gui.common.gui_state import GuiState
from app.paths import AppPaths

NOTE = "no OS keyring is available; the key is kept in /home/u/.config/modeldeck/api-key, readable only by you"


def test_a_hidden_hint_stays_hidden_until_it_says_something_new(qtbot: QtBot, paths: AppPaths) -> None:
    panel = EndpointPanel(GuiState(paths))
    qtbot.addWidget(panel)
    panel.show()
    panel.set_endpoint("http://127.0.0.1:8642/v1", "k", NOTE)
    assert panel.key_hint.isVisible() and panel.key_hint.label.text() == NOTE
    qtbot.mouseClick(panel.key_hint.hide_button, Qt.MouseButton.LeftButton)
    assert not panel.key_hint.isVisible()

    later = EndpointPanel(GuiState(paths))  # the next run, reading the same file
    qtbot.addWidget(later)
    later.show()
    later.set_endpoint("http://127.0.0.1:8642/v1", "k", NOTE)
    assert not later.key_hint.isVisible()
    later.set_endpoint("http://127.0.0.1:8642/v1", "k", NOTE.replace("api-key", "other-key"))
    assert later.key_hint.isVisible()
    later.set_endpoint("http://127.0.0.1:8642/v1", "k", "")
    assert not later.key_hint.isVisible()
