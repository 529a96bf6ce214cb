"""The first-run offer on Home: one click starts the bundled model, and the panel follows it until it is ready."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.api_types import LAUNCHABLE, ModelRecord, ModelState
from app.byte_size import format_bytes

BUNDLED_SOURCE = "bundled"
STATE_TEXT = {
    ModelState.STARTING: "Starting the model\N{HORIZONTAL ELLIPSIS} (loading it takes a few seconds)",
    ModelState.RESTARTING: "Restarting the model\N{HORIZONTAL ELLIPSIS}",
    ModelState.READY: "Ready: the endpoint below now answers for it.",
    ModelState.STOPPING: "Stopping\N{HORIZONTAL ELLIPSIS}",
}


def bundled_record(models: list[ModelRecord]) -> ModelRecord | None:
    """The model ModelDeck ships with, when the service found it."""
    return next((m for m in models if m.get("source") == BUNDLED_SOURCE), None)


class FirstRunPanel(QFrame):
    """Welcome text and a large "Start the bundled model" button; asks for the launch through a signal."""

    sig_start_requested = Signal(str)  # model id
    sig_dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("first_run_panel")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet("#first_run_panel { background: palette(alternate-base); }")
        self._model_id = ""
        self._pending = False
        self._connected = False
        self.title_label = QLabel("Welcome to ModelDeck")
        font = QFont(self.title_label.font())
        font.setPointSizeF(font.pointSizeF() * 1.5)
        font.setBold(True)
        self.title_label.setFont(font)
        self.title_label.setAccessibleName("Welcome")
        self.intro_label = QLabel()
        self.intro_label.setWordWrap(True)
        self.intro_label.setAccessibleName("What the bundled model is")
        self.start_button = QPushButton("Start the bundled model")
        self.start_button.setAccessibleName("Start the bundled model")
        self.start_button.setDefault(True)
        bold = QFont(self.start_button.font())
        bold.setBold(True)
        self.start_button.setFont(bold)
        self.dismiss_button = QPushButton("Not now")
        self.dismiss_button.setAccessibleName("Hide the first-run offer")
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        self.status_label.setAccessibleName("Bundled model status")
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.dismiss_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.title_label)
        layout.addWidget(self.intro_label)
        layout.addLayout(buttons)
        layout.addWidget(self.status_label)
        self.start_button.clicked.connect(self._on_start_button_clicked)
        self.dismiss_button.clicked.connect(self.sig_dismissed.emit)
        self.set_bundled(None, connected=False)

    @property
    def model_id(self) -> str:
        return self._model_id

    def set_bundled(self, record: ModelRecord | None, connected: bool) -> None:
        """Show the bundled model's record (None: the service has not listed it, or has none)."""
        self._connected = connected
        if record is None:
            self._model_id = ""
            self.intro_label.setText(
                "ModelDeck serves language models on this machine through an OpenAI-compatible endpoint."
            )
            self.status_label.setText(
                "Looking for the bundled model\N{HORIZONTAL ELLIPSIS}" if not connected else "No bundled model found."
            )
            self.start_button.setEnabled(False)
            self.status_label.setVisible(True)
            return
        self._model_id = str(record["id"])
        self.intro_label.setText(
            f"Start {record.get('name') or self._model_id} ({format_bytes(record.get('size_bytes'))}, runs on the "
            "CPU, nothing to download) and get an OpenAI-compatible endpoint on this machine in a few seconds."
        )
        state = record["state"]
        if state in LAUNCHABLE:
            self._pending = self._pending and state == ModelState.STOPPED
        else:
            self._pending = False
        failed = state == ModelState.FAILED
        self.status_label.setText(
            f"It did not start: {record.get('message') or 'no reason given'}" if failed else STATE_TEXT.get(state, "")
        )
        self.status_label.setStyleSheet("color: #c0392b;" if failed else "")
        self.status_label.setVisible(bool(self.status_label.text()))
        self.start_button.setEnabled(connected and state in LAUNCHABLE and not self._pending)

    def launch_failed(self, message: str) -> None:
        """The service refused the launch (no engine event will come): say why and allow another try."""
        self._pending = False
        self.status_label.setText(f"It did not start: {message}")
        self.status_label.setStyleSheet("color: #c0392b;")
        self.status_label.setVisible(True)
        self.start_button.setEnabled(self._connected and bool(self._model_id))

    @Slot()
    def _on_start_button_clicked(self) -> None:
        if self._model_id:
            self._pending = True  # until the engine's state changes: one click, one launch
            self.start_button.setEnabled(False)
            self.status_label.setText("Asking the service to start it\N{HORIZONTAL ELLIPSIS}")
            self.status_label.setVisible(True)
            self.sig_start_requested.emit(self._model_id)
