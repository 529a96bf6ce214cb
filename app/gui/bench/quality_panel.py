"""Quality cards beside the benchmark cards: run a quality measurement of a model's variants on the service (one at
a time, in its child process), follow its `quality` events, list the saved cards and compare two side by side.
Every call goes through the connection's worker threads; this panel holds no figures of its own."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.api_types import ModelRecord, QualityListing, QualityRunRecord
from app.client import ControlClient
from app.gui.common.quality_format import CARD_COLUMNS, card_cells, run_results_text, run_status
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection

PROGRESS_STEPS = 1000
MIN_TOKENS = 128
MAX_TOKENS = 1_048_576


def _progress(run: QualityRunRecord) -> tuple[int, float]:
    """How far a run has got, comparable between two states of one run: ended, then the share measured."""
    return (0 if run["state"] == "running" else 1, float(run["fraction"]))


def _table(columns: list[str], multi: bool) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(columns)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    mode = QAbstractItemView.SelectionMode.ExtendedSelection if multi else QAbstractItemView.SelectionMode.NoSelection
    table.setSelectionMode(mode)
    table.setTabKeyNavigation(False)
    table.verticalHeader().setVisible(False)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(True)
    return table


def _fill(table: QTableWidget, rows: list[list[str]]) -> None:
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            table.setItem(r, c, QTableWidgetItem(text))


class QualityPanel(QWidget):
    """Runs quality measurements through the service and lists and compares the saved quality cards."""

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._connection = connection
        self._list_call = LatestCall(connection, self)
        self._compare_call = LatestCall(connection, self)
        self._models_call = LatestCall(connection, self)
        self.run: QualityRunRecord | None = None
        self.cards: list[dict[str, Any]] = []
        self.model_combo = QComboBox()
        self.tokens_spin = QSpinBox()
        self.tokens_spin.setRange(MIN_TOKENS, MAX_TOKENS)
        self.tokens_spin.setValue(4096)
        self.run_button = QPushButton("Measure quality")
        self.run_button.setAccessibleName("Measure quality")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setAccessibleName("Cancel the quality run")
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, PROGRESS_STEPS)
        self.status_label = QLabel("Measures each variant of a model against its most precise one (llama.cpp).")
        self.status_label.setWordWrap(True)
        self.results_label = QLabel()  # the run's figures, which a card that could not be saved does not hold
        self.results_label.setWordWrap(True)
        self.results_label.setTextFormat(Qt.TextFormat.PlainText)
        self.results_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.results_label.setAccessibleName("Figures of this quality run")
        self.cards_table = _table(list(CARD_COLUMNS), multi=True)
        self.compare_button = QPushButton("Compare the two selected quality cards")
        self.compare_button.setAccessibleName("Compare the two selected quality cards")
        self.compare_table = _table(["", "A", "B"], multi=False)
        for widget, name in (
            (self.model_combo, "Model to measure"), (self.tokens_spin, "Tokens of text to score"),
            (self.cards_table, "Saved quality cards"), (self.compare_table, "Two quality cards side by side"),
        ):  # fmt: skip
            widget.setAccessibleName(name)
        self.cancel_button.setEnabled(False)
        self.compare_button.setEnabled(False)
        self._build()
        self.run_button.clicked.connect(self._on_run_button_clicked)
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        self.compare_button.clicked.connect(self._on_compare_button_clicked)
        self.cards_table.itemSelectionChanged.connect(self._on_cards_table_selection_changed)
        connection.sig_quality_changed.connect(self._on_connection_quality_changed)

    def _build(self) -> None:
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Model"))
        controls.addWidget(self.model_combo, 1)
        controls.addWidget(QLabel("Tokens"))
        controls.addWidget(self.tokens_spin)
        controls.addWidget(self.run_button)
        controls.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Quality cards"))
        layout.addLayout(controls)
        layout.addWidget(self.progress_bar)
        layout.addWidget(self.status_label)
        layout.addWidget(self.results_label)
        layout.addWidget(self.cards_table, 1)
        layout.addWidget(self.compare_button)
        layout.addWidget(self.compare_table, 1)

    def showEvent(self, event: QShowEvent) -> None:
        """Cards are also saved by `modeldeck quality`, and models come and go: look again."""
        super().showEvent(event)
        if self._connection.is_connected:
            self.refresh_cards()
            self._models_call.run(ControlClient.models, self._on_models_received, lambda _message: None)

    def _on_models_received(self, models: list[ModelRecord]) -> None:
        current = self.model_combo.currentText()
        self.model_combo.clear()
        self.model_combo.addItems([str(m["id"]) for m in models if m.get("engine") != "external"])
        if current:
            self.model_combo.setCurrentText(current)

    def refresh_cards(self) -> None:
        self._list_call.run(lambda client: client.quality(), self._on_quality_listed, self._show_error)

    def _on_quality_listed(self, answer: QualityListing) -> None:
        self.cards = list(answer["cards"])
        _fill(self.cards_table, [card_cells(card) for card in self.cards])
        if answer["run"] is not None and self.run is None:
            self.show_run(answer["run"])

    @Slot(object)
    def _on_connection_quality_changed(self, run: QualityRunRecord) -> None:
        self.show_run(run)

    def show_run(self, run: QualityRunRecord) -> None:
        """Show a run's state. An older state of the run shown (events and answers cross threads) is dropped."""
        shown = self.run
        if shown is not None and shown["id"] == run["id"] and _progress(run) < _progress(shown):
            return
        finished_now = run["state"] != "running" and (shown is None or shown["state"] == "running")
        self.run = run
        self.progress_bar.setValue(round(float(run["fraction"]) * PROGRESS_STEPS))
        self.status_label.setText(run_status(run))
        measured = run_results_text(run)
        self.results_label.setText(f"Measured in this run (PPL change, mean KLD, top-token agreement): {measured}"
                                   if measured else "")  # fmt: skip
        running = run["state"] == "running"
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        if finished_now:
            self.refresh_cards()

    def _on_run_button_clicked(self) -> None:
        model = self.model_combo.currentText()
        if not model:
            self.status_label.setText("Choose a model first.")
            return
        tokens = self.tokens_spin.value()
        self.run_button.setEnabled(False)
        self._connection.call(lambda client: client.start_quality(model, tokens=tokens), self.show_run,
                              self._on_start_failed)  # fmt: skip

    def _on_start_failed(self, message: str) -> None:
        self.run_button.setEnabled(True)
        self._show_error(message)

    def _on_cancel_button_clicked(self) -> None:
        self.cancel_button.setEnabled(False)
        self._connection.call(lambda client: client.cancel_quality(), self.show_run, self._show_error)

    def _show_error(self, message: str) -> None:
        self.status_label.setText(message)

    def selected_card_ids(self) -> list[str]:
        rows = sorted({index.row() for index in self.cards_table.selectionModel().selectedRows()})
        return [str(self.cards[row]["id"]) for row in rows if row < len(self.cards)]

    def _on_cards_table_selection_changed(self) -> None:
        self.compare_button.setEnabled(len(self.selected_card_ids()) == 2)

    def _on_compare_button_clicked(self) -> None:
        chosen = self.selected_card_ids()
        if len(chosen) != 2:
            return
        first, second = chosen[1], chosen[0]  # listed newest first: the older is A
        self._compare_call.run(lambda client: client.compare_quality_cards(first, second), self._on_compared,
                               self._show_error)  # fmt: skip

    def _on_compared(self, rows: list[list[str]]) -> None:
        _fill(self.compare_table, rows)
