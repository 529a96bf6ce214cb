"""The OpenAI endpoint's URL and API key, each with a Copy button; the key is masked until revealed."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QGridLayout, QLabel, QLineEdit, QPushButton, QWidget

from app.gui.common.gui_state import GuiState
from app.gui.common.hint_box import HintBox

NO_KEY_TEXT = "none: the endpoint accepts requests without a key (loopback only)"
WIDEST_URL = "http://127.0.0.1:65535/v1"  # the fields never get too narrow to show a whole local URL


class EndpointPanel(QWidget):
    """Shows where clients send requests and with which key."""

    sig_text_copied = Signal(str)  # what was copied, in words ("URL", "API key")

    def __init__(self, state: GuiState | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._api_key: str | None = None
        self.url_edit = QLineEdit()
        self.url_edit.setReadOnly(True)
        self.url_edit.setPlaceholderText("not connected")
        self.url_edit.setAccessibleName("Endpoint URL")
        self.copy_url_button = QPushButton("Copy")
        self.copy_url_button.setToolTip("Copy the endpoint URL")
        self.copy_url_button.setAccessibleName("Copy the endpoint URL")
        self.key_edit = QLineEdit()
        self.key_edit.setReadOnly(True)
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setAccessibleName("API key")
        room = self.url_edit.fontMetrics().horizontalAdvance(WIDEST_URL + "  ")
        self.url_edit.setMinimumWidth(room)
        self.key_edit.setMinimumWidth(room)
        self.reveal_button = QPushButton("Show")
        self.reveal_button.setCheckable(True)
        self.reveal_button.setToolTip("Show or hide the API key")
        self.reveal_button.setAccessibleName("Show or hide the API key")
        self.copy_key_button = QPushButton("Copy")
        self.copy_key_button.setToolTip("Copy the API key")
        self.copy_key_button.setAccessibleName("Copy the API key")
        self.key_hint = HintBox("api_key_note", state, "About the API key")

        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Endpoint"), 0, 0)
        layout.addWidget(self.url_edit, 0, 1)
        layout.addWidget(self.copy_url_button, 0, 3)
        layout.addWidget(QLabel("API key"), 1, 0)
        layout.addWidget(self.key_edit, 1, 1)
        layout.addWidget(self.reveal_button, 1, 2)
        layout.addWidget(self.copy_key_button, 1, 3)
        layout.addWidget(self.key_hint, 2, 1, 1, 3)
        layout.setColumnStretch(1, 1)

        self.copy_url_button.clicked.connect(self._on_copy_url_button_clicked)
        self.copy_key_button.clicked.connect(self._on_copy_key_button_clicked)
        self.reveal_button.toggled.connect(self._on_reveal_button_toggled)
        self.set_endpoint(None, None)

    def set_endpoint(self, url: str | None, api_key: str | None, note: str = "") -> None:
        """Show an endpoint; None for the URL clears the panel (not connected)."""
        self._api_key = api_key
        self.url_edit.setText(url or "")
        self.copy_url_button.setEnabled(bool(url))
        self.key_edit.setText(api_key if api_key is not None else (NO_KEY_TEXT if url else ""))
        has_key = api_key is not None
        self.copy_key_button.setEnabled(has_key)
        self.reveal_button.setEnabled(has_key)
        self._apply_echo_mode()
        self.key_hint.show_hint(note)

    def _apply_echo_mode(self) -> None:
        masked = self._api_key is not None and not self.reveal_button.isChecked()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password if masked else QLineEdit.EchoMode.Normal)
        self.reveal_button.setText("Hide" if self.reveal_button.isChecked() else "Show")

    @Slot(bool)
    def _on_reveal_button_toggled(self, _checked: bool) -> None:
        self._apply_echo_mode()

    @Slot()
    def _on_copy_url_button_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.url_edit.text())
        self.sig_text_copied.emit("URL")

    @Slot()
    def _on_copy_key_button_clicked(self) -> None:
        if self._api_key is not None:
            QGuiApplication.clipboard().setText(self._api_key)
            self.sig_text_copied.emit("API key")
