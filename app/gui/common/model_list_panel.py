"""The list of models, with Launch and Stop for the selected one and its engine's state in words."""

from __future__ import annotations

from PySide6.QtCore import QItemSelection, QModelIndex, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.api_types import ACTIVE, LAUNCHABLE, ModelState
from app.gui.common.model_item_model import MODEL_COLUMN, MODEL_ID_ROLE, ModelItemModel
from app.gui.common.state_words import STATE_WORDS


class ModelListPanel(QWidget):
    """Shows a `ModelItemModel`; asks for launches and stops through signals, and never calls the service."""

    sig_selection_changed = Signal(str)  # model id, "" when nothing is selected
    sig_launch_requested = Signal(str)
    sig_stop_requested = Signal(str)

    def __init__(self, item_model: ModelItemModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._item_model = item_model
        self._actions_enabled = False
        self._pending: set[str] = set()  # asked to launch or stop, no state change seen yet
        self.table_view = QTableView()
        self.table_view.setModel(item_model)
        self.table_view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table_view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table_view.verticalHeader().hide()
        self.table_view.setTabKeyNavigation(False)  # Tab goes on to Launch; arrows move between models
        self.table_view.setAccessibleName("Models")
        header = self.table_view.horizontalHeader()
        # The id takes what is left; state, size and memory are short and never cut ("336.9 MiB (prediction …").
        for column in range(item_model.columnCount()):
            mode = QHeaderView.ResizeMode.Stretch if column == MODEL_COLUMN else QHeaderView.ResizeMode.ResizeToContents
            header.setSectionResizeMode(column, mode)
        self.launch_button = QPushButton("Launch")
        self.stop_button = QPushButton("Stop")
        self.launch_button.setAccessibleName("Launch the selected model")
        self.stop_button.setAccessibleName("Stop the selected model")
        self.state_label = QLabel()
        self.state_label.setWordWrap(True)
        self.state_label.setAccessibleName("State of the selected model")

        buttons = QHBoxLayout()
        buttons.addWidget(self.launch_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.table_view)
        layout.addLayout(buttons)
        layout.addWidget(self.state_label)

        self.launch_button.clicked.connect(self._on_launch_button_clicked)
        self.stop_button.clicked.connect(self._on_stop_button_clicked)
        self.table_view.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        item_model.dataChanged.connect(self._on_item_model_changed)
        item_model.modelReset.connect(self._on_item_model_reset)
        self._refresh()

    def selected_model_id(self) -> str | None:
        rows = self.table_view.selectionModel().selectedRows()
        return str(rows[0].data(MODEL_ID_ROLE)) if rows else None

    def select_model(self, model_id: str) -> None:
        row = self._item_model.row_of(model_id)
        if row >= 0:
            self.table_view.selectRow(row)

    def set_actions_enabled(self, enabled: bool) -> None:
        """Launch and Stop work only while the service is connected."""
        self._actions_enabled = enabled
        self._refresh()

    def settle(self, model_id: str) -> None:
        """A launch or stop request ended (its engine changed state, or the call failed)."""
        self._pending.discard(model_id)
        self._refresh()

    def _refresh(self) -> None:
        model_id = self.selected_model_id()
        record = self._item_model.record(model_id) if model_id else None
        if record is None:
            self.launch_button.setEnabled(False)
            self.stop_button.setEnabled(False)
            self.state_label.setText("Select a model.")
            self.state_label.setToolTip("")
            return
        state = self._item_model.state_of(record["id"])
        idle = self._actions_enabled and record["id"] not in self._pending
        self.launch_button.setEnabled(idle and state in LAUNCHABLE)
        self.stop_button.setEnabled(idle and state in ACTIVE)
        if state is None:
            self.state_label.setText(f"{record['id']}: state unknown (not connected to the service)")
            self.state_label.setToolTip("")
            self.state_label.setStyleSheet("")
            return
        words = f"{record['id']}: {STATE_WORDS[state]}"
        message = str(record.get("message") or "")
        if message and message.lower() != state:
            words += f" \N{EM DASH} {message}"
        self.state_label.setText(words)
        self.state_label.setToolTip(message)
        self.state_label.setStyleSheet("color: #c0392b;" if state == ModelState.FAILED else "")

    @Slot()
    def _on_launch_button_clicked(self) -> None:
        model_id = self.selected_model_id()
        if model_id:
            self._pending.add(model_id)
            self._refresh()
            self.sig_launch_requested.emit(model_id)

    @Slot()
    def _on_stop_button_clicked(self) -> None:
        model_id = self.selected_model_id()
        if model_id:
            self._pending.add(model_id)
            self._refresh()
            self.sig_stop_requested.emit(model_id)

    @Slot(QItemSelection, QItemSelection)
    def _on_table_selection_changed(self, _selected: QItemSelection, _deselected: QItemSelection) -> None:
        self._refresh()
        self.sig_selection_changed.emit(self.selected_model_id() or "")

    @Slot(QModelIndex, QModelIndex)
    def _on_item_model_changed(self, _first: QModelIndex, _last: QModelIndex) -> None:
        self._refresh()

    @Slot()
    def _on_item_model_reset(self) -> None:
        if self.selected_model_id() is None and self._item_model.rowCount() > 0:
            self.table_view.selectRow(0)  # emits the selection change, which refreshes
        else:
            self._refresh()
