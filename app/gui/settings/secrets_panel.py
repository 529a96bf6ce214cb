"""The Hugging Face token: typed in once, saved to the service's OS keyring, never shown back.

The keyring is read and written by the service, on its worker threads; this panel only learns whether a token is
saved. The text field is cleared as soon as the token is sent.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget

from app.gui.connection.service_connection import ServiceConnection


class SecretsPanel(QGroupBox):
    """Set or clear the Hugging Face token; shows only whether one is saved and where it comes from."""

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__("Hugging Face token", parent)
        self._connection = connection
        self.token_edit = QLineEdit()
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("hf_\N{HORIZONTAL ELLIPSIS} (for gated models and higher rate limits)")
        self.token_edit.setAccessibleName("Hugging Face token")
        self.save_button = QPushButton("Save token")
        self.save_button.setAccessibleName("Save the Hugging Face token")
        self.save_button.setEnabled(False)
        self.clear_button = QPushButton("Remove token")
        self.clear_button.setAccessibleName("Remove the Hugging Face token")
        self.state_label = QLabel("")
        self.state_label.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.token_edit, 1)
        row.addWidget(self.save_button)
        row.addWidget(self.clear_button)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.state_label)
        self.token_edit.textChanged.connect(self._on_token_edit_text_changed)
        self.token_edit.returnPressed.connect(self._on_save_button_clicked)
        self.save_button.clicked.connect(self._on_save_button_clicked)
        self.clear_button.clicked.connect(self._on_clear_button_clicked)
        connection.sig_hf_token_changed.connect(self._on_connection_hf_token_changed)

    def show_state(self, info: Mapping[str, object]) -> None:
        """`info` is the settings answer's `hf_token`: {set, source, note}; the token itself never comes back."""
        source = str(info.get("source") or "none")
        if source == "environment":
            text = "A token is set by HF_TOKEN in the service's environment; it takes precedence over a saved one."
        elif info.get("set"):
            text = "A token is saved in the OS keyring."
        else:
            text = "No token is saved."
        note = str(info.get("note") or "")
        self.state_label.setText(f"{text} {note}".strip())
        self.clear_button.setEnabled(bool(info.get("set")) and source == "keyring")

    @Slot(str)
    def _on_token_edit_text_changed(self, text: str) -> None:
        self.save_button.setEnabled(bool(text.strip()))

    @Slot()
    def _on_save_button_clicked(self) -> None:
        token = self.token_edit.text().strip()
        if not token:
            return
        self.token_edit.clear()  # the field never holds the token longer than it takes to send it
        self.state_label.setText("Saving the token\N{HORIZONTAL ELLIPSIS}")
        self._connection.set_hf_token(token)

    @Slot()
    def _on_clear_button_clicked(self) -> None:
        self._connection.clear_hf_token()

    @Slot(bool)
    def _on_connection_hf_token_changed(self, saved: bool) -> None:
        self.show_state({"set": saved, "source": "keyring" if saved else "none"})
