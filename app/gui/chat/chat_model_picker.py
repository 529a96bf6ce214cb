"""The chat's model picker: every model with its state and memory, a Load button that starts it with its saved
load settings, and a Load settings dialog (app.gui.common.load_dialog)."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QWidget

from app.api_types import ModelRecord, ModelState
from app.byte_size import format_bytes
from app.gui.common.load_dialog import LoadDialog
from app.gui.common.model_item_model import ModelItemModel
from app.gui.common.state_words import state_word
from app.gui.connection.service_connection import ServiceConnection

ELLIPSIS = "\N{HORIZONTAL ELLIPSIS}"
LOADING_STATES = frozenset({ModelState.STARTING, ModelState.RESTARTING})
TRANSITIONAL = LOADING_STATES | {ModelState.STOPPING}  # words that end in an ellipsis


def model_line(record: ModelRecord, state: ModelState | None) -> str:
    """'<id> (loaded, 212.4 MiB in use)' or '<id> (not loaded, 93.8 MiB on disk)'; `state` None: not known."""
    word = "state unknown" if state is None else state_word(state).lower() + (ELLIPSIS if state in TRANSITIONAL else "")
    rss = record.get("rss_bytes")
    if state == ModelState.READY and rss:
        memory = f"{format_bytes(rss)} in use"
    elif record.get("size_bytes"):
        memory = f"{format_bytes(record['size_bytes'])} on disk"
    else:
        memory = "remote" if record.get("source") == "remote" else ""
    return f"{record['id']} ({word}, {memory})" if memory else f"{record['id']} ({word})"


class ChatModelPicker(QWidget):
    """Follows the window's item model of the models; `sig_state_changed` after any model's state changes."""

    sig_state_changed = Signal()

    def __init__(self, connection: ServiceConnection, models: ModelItemModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._connection = connection
        self._models = models
        self._wanted: str | None = None  # a model asked for before the service listed it
        self.dialog: LoadDialog | None = None
        self.model_combo = QComboBox()
        self.model_combo.setAccessibleName("Model to chat with")
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.setMinimumContentsLength(16)
        self.model_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.load_button = QPushButton("&Load")
        self.load_button.setAccessibleName("Load the model")
        self.load_button.setToolTip("Start the model with its saved load settings")
        self.settings_button = QPushButton(f"Load settings{ELLIPSIS}")
        self.settings_button.setAccessibleName("Load settings of the model")
        self.problem_label = QLabel("")
        self.problem_label.setWordWrap(True)
        self.problem_label.setVisible(False)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        label = QLabel("&Model:")
        label.setBuddy(self.model_combo)
        layout.addWidget(label)
        layout.addWidget(self.model_combo, 1)
        layout.addWidget(self.load_button)
        layout.addWidget(self.settings_button)
        layout.addWidget(self.problem_label)
        models.dataChanged.connect(self._on_models_changed)
        models.modelReset.connect(self._on_models_changed)
        models.rowsInserted.connect(self._on_models_changed)
        self.model_combo.currentIndexChanged.connect(self._on_model_combo_current_index_changed)
        self.load_button.clicked.connect(self._on_load_button_clicked)
        self.settings_button.clicked.connect(self._on_settings_button_clicked)
        self._on_models_changed()

    def current_model(self) -> str:
        data = self.model_combo.currentData()
        return str(data) if data else ""

    def has_model(self, model_id: str) -> bool:
        return self.model_combo.findData(model_id) >= 0

    def select_model(self, model_id: str) -> None:
        index = self.model_combo.findData(model_id)
        if index >= 0:
            self.model_combo.setCurrentIndex(index)
            self._wanted = None
        else:
            self._wanted = model_id

    def state_of(self, model_id: str) -> ModelState | None:
        return self._models.state_of(model_id)

    def load(self) -> None:
        """Start the chosen model with its saved load settings; its state shows in the picker as it loads."""
        model_id = self.current_model()
        if not model_id:
            return
        self._show_problem(None)
        self.load_button.setEnabled(False)
        self._connection.call(lambda client: client.start_model(model_id), lambda _record: None, self._on_load_failed)

    def open_load_dialog(self) -> LoadDialog | None:
        model_id = self.current_model()
        if not model_id:
            return None
        if self.dialog is not None:
            self.dialog.close()
            self.dialog.deleteLater()
        self.dialog = LoadDialog(self._connection, model_id, self.state_of(model_id), self)
        self.dialog.open()
        return self.dialog

    def _show_problem(self, message: str | None) -> None:
        self.problem_label.setText(message or "")
        self.problem_label.setVisible(bool(message))

    def _update_buttons(self) -> None:
        state = self.state_of(self.current_model())
        self.load_button.setEnabled(state in ("stopped", "failed"))
        self.load_button.setText(f"Loading{ELLIPSIS}" if state in LOADING_STATES else "&Load")
        self.settings_button.setEnabled(bool(self.current_model()))

    @Slot()
    def _on_models_changed(self) -> None:
        records = [r for m in self._models.model_ids() if (r := self._models.record(m)) is not None]
        current = self._wanted or self.current_model()
        ids = [str(r["id"]) for r in records]
        combo = self.model_combo
        combo.blockSignals(True)
        try:
            if ids != [combo.itemData(i) for i in range(combo.count())]:
                combo.clear()
                for record in records:
                    combo.addItem(model_line(record, self.state_of(record["id"])), record["id"])
            else:
                for index, record in enumerate(records):
                    combo.setItemText(index, model_line(record, self.state_of(record["id"])))
            if current in ids:
                combo.setCurrentIndex(ids.index(current))
                self._wanted = None
        finally:
            combo.blockSignals(False)
        self._update_buttons()
        self.sig_state_changed.emit()

    @Slot()
    def _on_model_combo_current_index_changed(self) -> None:
        self._update_buttons()
        self.sig_state_changed.emit()

    @Slot()
    def _on_load_button_clicked(self) -> None:
        self.load()

    @Slot()
    def _on_settings_button_clicked(self) -> None:
        self.open_load_dialog()

    def _on_load_failed(self, message: str) -> None:
        self._show_problem(f"Could not load: {message}")
        self._update_buttons()
