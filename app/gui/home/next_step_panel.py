"""Home's next step once a model is ready: chat with it, or copy the endpoint for any OpenAI client."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget


class NextStepPanel(QFrame):
    """Hidden until a model is ready and the endpoint is known."""

    sig_chat_requested = Signal(str)  # model id
    sig_text_copied = Signal(str)  # what was copied, in words ("endpoint URL")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._model_id: str | None = None
        self._url: str | None = None
        self.message_label = QLabel()
        self.message_label.setWordWrap(True)
        self.message_label.setAccessibleName("Next step")
        self.chat_button = QPushButton("Open Chat")
        self.chat_button.setAccessibleName("Chat with the ready model")
        self.copy_button = QPushButton("Copy endpoint URL")
        self.copy_button.setAccessibleName("Copy the endpoint URL for an OpenAI client")
        layout = QHBoxLayout(self)
        layout.addWidget(self.message_label, 1)
        layout.addWidget(self.chat_button)
        layout.addWidget(self.copy_button)
        self.chat_button.clicked.connect(self._on_chat_button_clicked)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        self.hide()

    def show_ready(self, model_id: str | None, url: str | None) -> None:
        """`model_id`: a ready model (None: none is); `url`: the endpoint's base URL, once known."""
        self._model_id, self._url = model_id, url
        if model_id is None:
            self.hide()
            return
        where = f" Any OpenAI client reaches it at {url}." if url else ""
        self.message_label.setText(f"<b>{model_id} is ready.</b> Next: chat with it.{where}")
        self.copy_button.setEnabled(url is not None)
        self.show()

    @Slot()
    def _on_chat_button_clicked(self) -> None:
        if self._model_id is not None:
            self.sig_chat_requested.emit(self._model_id)

    @Slot()
    def _on_copy_button_clicked(self) -> None:
        if self._url is not None:
            QGuiApplication.clipboard().setText(self._url)
            self.sig_text_copied.emit("endpoint URL")
