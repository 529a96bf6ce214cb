"""A paragraph of advice the user can hide for good with "Got it": it stays hidden in later runs until it says
something new (the window's GuiState remembers it)."""

from __future__ import annotations

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from app.gui.common.gui_state import GuiState


class HintBox(QFrame):
    """Hint `name`; without a GuiState it is never remembered (hidden for this run only)."""

    def __init__(self, name: str, state: GuiState | None, accessible_name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._name, self._state, self._text = name, state, ""
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setAccessibleName(accessible_name)
        self.hide_button = QPushButton("Got it")
        self.hide_button.setAccessibleName(f"Hide this hint: {accessible_name}")
        self.hide_button.setToolTip("Hide this hint; it shows again only if it comes to say something new")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.hide_button)
        self.hide_button.clicked.connect(self._on_hide_button_clicked)
        self.setVisible(False)

    def show_hint(self, text: str) -> None:
        """Show `text`, unless it is empty or the user hid it."""
        self._text = text
        self.label.setText(text)
        hidden = self._state is not None and self._state.hint_hidden(self._name, text)
        self.setVisible(bool(text) and not hidden)

    @Slot()
    def _on_hide_button_clicked(self) -> None:
        if self._state is not None:
            self._state.hide_hint(self._name, self._text)
        self.setVisible(False)
