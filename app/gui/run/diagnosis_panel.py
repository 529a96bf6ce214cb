"""Why a model's engine died, in words, with the action that fits: shown on the Run page instead of an exit code."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.api_types import TROUBLED, ModelRecord

MIN_CONTEXT = 256


def smaller_context(record: ModelRecord) -> int | None:
    """Half the context of the plan the engine ran with (at least MIN_CONTEXT), or None when no plan is known."""
    plan = record.get("plan")
    context = plan.get("context") if plan else None
    if not isinstance(context, int) or context <= MIN_CONTEXT:
        return None
    return max(MIN_CONTEXT, context // 2)


class DiagnosisPanel(QWidget):
    """Shows a failed model's diagnosis ({kind, summary, advice}, as the control API sends it); hidden otherwise."""

    sig_relaunch_requested = Signal(str, object)  # model id, overrides such as {"context": 2048}

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._model_id = ""
        self._overrides: dict[str, int] = {}
        self.summary_label = QLabel()
        self.summary_label.setWordWrap(True)
        self.summary_label.setAccessibleName("Why the engine stopped")
        self.advice_label = QLabel()
        self.advice_label.setWordWrap(True)
        self.advice_label.setAccessibleName("What to try")
        self.relaunch_button = QPushButton("Relaunch with a smaller context")
        self.relaunch_button.setAccessibleName("Relaunch with a smaller context")
        buttons = QHBoxLayout()
        buttons.addWidget(self.relaunch_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary_label)
        layout.addWidget(self.advice_label)
        layout.addLayout(buttons)
        self.relaunch_button.clicked.connect(self._on_relaunch_button_clicked)
        self.show_record(None)

    def show_record(self, record: ModelRecord | None) -> None:
        """Show the diagnosis of `record` when its engine failed for a known reason; hide the panel otherwise."""
        diagnosis = record.get("diagnosis") if record is not None else None
        if record is None or not diagnosis or record["state"] not in TROUBLED:
            self.setVisible(False)
            self._model_id = ""
            return
        self._model_id = str(record["id"])
        self.summary_label.setText(f"<b>{record['id']}</b>: {diagnosis.get('summary', '')}")
        self.advice_label.setText(str(diagnosis.get("advice", "")))
        context = smaller_context(record) if diagnosis.get("kind") == "out_of_memory" else None
        self._overrides = {"context": context} if context is not None else {}
        self.relaunch_button.setText(f"Relaunch with a smaller context ({context} tokens)" if context else "")
        self.relaunch_button.setVisible(context is not None)
        self.setVisible(True)

    @Slot()
    def _on_relaunch_button_clicked(self) -> None:
        if self._model_id and self._overrides:
            self.sig_relaunch_requested.emit(self._model_id, dict(self._overrides))
