"""The Benchmark page: run a concurrency sweep on the service, watch it, read its table and charts, list the saved
cards and compare two side by side.

The sweep runs in a child process of the service; this page only sends the request, follows the service's `bench`
events (a few a second) and fetches cards, every call on the connection's worker threads.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.api_types import BenchCardRecord, BenchCardSummary, BenchLevel, BenchListing, BenchRunRecord, ModelRecord
from app.gui.bench.bench_charts import BenchChartsPanel
from app.gui.bench.bench_format import (
    CARD_COLUMNS,
    LEVEL_COLUMNS,
    PROMPT_MODES,
    card_cells,
    level_cells,
    parse_levels,
    run_status,
)
from app.gui.bench.quality_panel import QualityPanel
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection

PROGRESS_STEPS = 1000
MAX_PROMPT_TOKENS = 32_768
MAX_OUTPUT_TOKENS = 8_192
MAX_REQUESTS = 10_000
MAX_TURNS = 64
MAX_CONVERSATIONS = 4096
MAX_SEED = 2**31 - 1  # a QSpinBox holds an int; the service takes up to 2**32 - 1


def _fill(table: QTableWidget, rows: list[list[str]], numbers_from: int) -> None:
    """Replace the table's rows; columns from `numbers_from` on are right-aligned figures."""
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            item = QTableWidgetItem(text)
            item.setToolTip(text)  # cells may be elided in a narrow column
            if c >= numbers_from:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            table.setItem(r, c, item)


_PHASE_ORDER = ("starting", "model", "warmup", "level", "saving")


def _progress(run: BenchRunRecord) -> tuple[int, int, float]:
    """How far a run has got, comparable between two states of one run: ended, then phase, then requests."""
    phase = _PHASE_ORDER.index(run["phase"]) if run["phase"] in _PHASE_ORDER else len(_PHASE_ORDER)
    return (0 if run["state"] == "running" else 1, phase, float(run["fraction"]))


def _table(columns: tuple[str, ...] | list[str], multi: bool = False) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setHorizontalHeaderLabels(list(columns))
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    mode = QAbstractItemView.SelectionMode.ExtendedSelection if multi else QAbstractItemView.SelectionMode.NoSelection
    table.setSelectionMode(mode)
    table.setTabKeyNavigation(False)  # Tab moves on to the next control; the arrow keys move between rows
    table.verticalHeader().setVisible(False)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    table.horizontalHeader().setStretchLastSection(True)
    return table


class BenchmarkPage(QWidget):
    """Runs benchmarks through the service and shows their results and the saved cards."""

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._connection = connection
        self._card_call = LatestCall(connection, self)
        self._compare_call = LatestCall(connection, self)
        self._list_call = LatestCall(connection, self)
        self._models_call = LatestCall(connection, self)
        self.run: BenchRunRecord | None = None  # the run followed: running, or the last one
        self.quality_panel = QualityPanel(connection)  # quality cards beside the benchmark cards
        self.cards: list[BenchCardSummary] = []

        self.model_combo = QComboBox()
        self.model_combo.setAccessibleName("Model")
        self.concurrency_edit = QLineEdit("1,4,16,64")
        self.concurrency_edit.setToolTip("Concurrency levels to sweep, comma-separated")
        self.prompt_spin = self._spin(1, MAX_PROMPT_TOKENS, 256)
        self.output_spin = self._spin(1, MAX_OUTPUT_TOKENS, 128)
        self.requests_spin = self._spin(0, MAX_REQUESTS, 0)
        self.requests_spin.setSpecialValueText("auto: max(8, 2 x concurrency)")
        self.mode_combo = QComboBox()
        for mode, label in PROMPT_MODES:
            self.mode_combo.addItem(label, mode)
        self.mode_combo.setToolTip("Identical prompts are answered from the engine's prompt cache after the first: "
                                   "they measure the cache, not the model.")  # fmt: skip
        self.prefix_spin = self._spin(1, MAX_PROMPT_TOKENS - 1, 128)
        self.conversations_spin = self._spin(0, MAX_CONVERSATIONS, 0)
        self.conversations_spin.setSpecialValueText("auto: max(3, concurrency)")
        self.turns_spin = self._spin(2, MAX_TURNS, 4)
        self.seed_spin = self._spin(0, MAX_SEED, 0)
        self.run_button = QPushButton("Run")
        self.cancel_button = QPushButton("Cancel")
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, PROGRESS_STEPS)
        self.status_label = QLabel("Pick a model and its concurrency levels, then Run.")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.results_label = QLabel("Results")
        self.results_label.setWordWrap(True)
        self.results_table = _table(LEVEL_COLUMNS)
        self.charts = BenchChartsPanel()
        self.cards_table = _table(CARD_COLUMNS, multi=True)
        self.compare_button = QPushButton("Compare the two selected")
        self.compare_label = QLabel("Select two saved cards to compare them side by side.")
        self.compare_label.setWordWrap(True)
        self.compare_table = _table(["", "A", "B"])
        for column in (1, 2):  # A and B share the width left; long values (card ids) are elided, in full as tooltips
            self.compare_table.horizontalHeader().setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
        for widget, name in (
            (self.concurrency_edit, "Concurrency levels"), (self.prompt_spin, "Prompt tokens"),
            (self.mode_combo, "Prompt mode"), (self.prefix_spin, "Shared prefix tokens"),
            (self.conversations_spin, "Conversations per level"), (self.turns_spin, "Turns per conversation"),
            (self.seed_spin, "Prompt seed"),
            (self.output_spin, "Output tokens"), (self.requests_spin, "Requests per level"),
            (self.run_button, "Run the benchmark"), (self.cancel_button, "Cancel the benchmark"),
            (self.progress_bar, "Benchmark progress"), (self.results_table, "Results per concurrency level"),
            (self.cards_table, "Saved benchmark cards"), (self.compare_button, "Compare the two selected cards"),
            (self.compare_table, "Two cards side by side"),
        ):  # fmt: skip
            widget.setAccessibleName(name)
        self._build()
        self._set_running(False)
        self.compare_button.setEnabled(False)

        self.mode_combo.currentIndexChanged.connect(self._on_mode_combo_changed)
        self.run_button.clicked.connect(self._on_run_button_clicked)
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        self.compare_button.clicked.connect(self._on_compare_button_clicked)
        self.cards_table.itemSelectionChanged.connect(self._on_cards_table_selection_changed)
        connection.sig_models_received.connect(self._on_connection_models_received)
        connection.sig_bench_changed.connect(self._on_connection_bench_changed)
        connection.sig_status_changed.connect(self._on_connection_status_changed)

    @staticmethod
    def _spin(low: int, high: int, value: int) -> QSpinBox:
        spin = QSpinBox()
        spin.setRange(low, high)
        spin.setValue(value)
        return spin

    def _build(self) -> None:
        form = QFormLayout()
        form.addRow("Model", self.model_combo)
        form.addRow("Concurrency", self.concurrency_edit)
        form.addRow("Prompt tokens", self.prompt_spin)
        form.addRow("Prompts", self.mode_combo)
        form.addRow("Shared prefix tokens", self.prefix_spin)
        form.addRow("Conversations per level", self.conversations_spin)
        form.addRow("Turns per conversation", self.turns_spin)
        form.addRow("Seed", self.seed_spin)
        form.addRow("Output tokens", self.output_spin)
        form.addRow("Requests per level", self.requests_spin)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.progress_bar, 1)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.addLayout(form)
        left_layout.addLayout(buttons)
        left_layout.addWidget(self.status_label)
        left_layout.addWidget(self.results_label)
        left_layout.addWidget(self.results_table, 1)
        left_layout.addWidget(self.charts, 2)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.addWidget(QLabel("Saved cards"))
        right_layout.addWidget(self.cards_table, 1)
        right_layout.addWidget(self.compare_button)
        right_layout.addWidget(self.compare_label)
        right_layout.addWidget(self.compare_table, 2)
        right_layout.addWidget(self.quality_panel, 3)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([600, 500])
        # The page scrolls rather than asking for more room than a 1080p screen at 200 % has.
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(splitter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)

    @property
    def is_running(self) -> bool:
        return self.run is not None and self.run["state"] == "running"

    def _set_running(self, running: bool) -> None:
        connected = self._connection.is_connected
        self.run_button.setEnabled(connected and not running)
        self.cancel_button.setEnabled(connected and running)
        for widget in (self.model_combo, self.concurrency_edit, self.prompt_spin, self.output_spin,
                       self.mode_combo, self.seed_spin):  # fmt: skip
            widget.setEnabled(not running)
        mode = self.prompt_mode
        self.prefix_spin.setEnabled(not running and mode == "shared-prefix")
        self.conversations_spin.setEnabled(not running and mode == "multi-turn")
        self.turns_spin.setEnabled(not running and mode == "multi-turn")
        self.requests_spin.setEnabled(not running and mode != "multi-turn")  # multi-turn: conversations x turns

    @property
    def prompt_mode(self) -> str:
        return str(self.mode_combo.currentData())

    @Slot(int)
    def _on_mode_combo_changed(self, _index: int) -> None:
        self._set_running(self.is_running)

    # From the connection ---------------------------------------------------------------------------------

    @Slot(object)
    def _on_connection_models_received(self, models: list[ModelRecord]) -> None:
        current = self.model_combo.currentText()
        self.model_combo.clear()
        self.model_combo.addItems([str(model["id"]) for model in models])
        if current:
            self.model_combo.setCurrentText(current)

    @Slot(str)
    def _on_connection_status_changed(self, _status: str) -> None:
        self._set_running(self.is_running)
        if self._connection.is_connected:
            self.refresh_cards()

    @Slot(object)
    def _on_connection_bench_changed(self, run: BenchRunRecord) -> None:
        self.show_run(run)

    def showEvent(self, event: QShowEvent) -> None:
        """Models come and go (downloads, imports) and cards are also saved by `modeldeck bench`: look again."""
        super().showEvent(event)
        if self._connection.is_connected:
            self.refresh_cards()
            # On failure the list shown stays; a lost service is reported by the connection itself.
            self._models_call.run(lambda client: client.models(), self._on_connection_models_received,
                                  lambda _message: None)  # fmt: skip

    def refresh_cards(self) -> None:
        """Fetch the saved cards (and the state of a run started elsewhere, such as before this window opened)."""
        self._list_call.run(lambda client: client.bench(), self._on_bench_listed, self._show_error)

    def _on_bench_listed(self, answer: BenchListing) -> None:
        self.cards = list(answer["cards"])
        selected = set(self.selected_card_ids())
        _fill(self.cards_table, [card_cells(card) for card in self.cards], 2)
        for row, card in enumerate(self.cards):
            created = self.cards_table.item(row, 0)
            if created is not None:
                created.setToolTip(f"Card {card['id']}")
            if card["id"] in selected:
                self.cards_table.selectRow(row)
        if answer["run"] is not None and self.run is None:
            self.show_run(answer["run"])

    def show_run(self, run: BenchRunRecord) -> None:
        """Show a run's state. An older state of the run shown (events and answers cross threads) is dropped."""
        shown = self.run
        if shown is not None and shown["id"] == run["id"] and _progress(run) < _progress(shown):
            return
        finished_now = run["state"] != "running" and (shown is None or shown["state"] == "running")
        self.run = run
        self.progress_bar.setValue(round(float(run["fraction"]) * PROGRESS_STEPS))
        self.status_label.setText(run_status(run))
        mode = run.get("prompt_mode") or "identical"  # an older service had only identical prompts
        self._show_levels(f"Results: {run['model']}, {mode} prompts (this run)", run["levels"])
        self._set_running(run["state"] == "running")
        if finished_now and run["state"] == "completed":
            self.refresh_cards()

    def _show_levels(self, title: str, levels: list[BenchLevel]) -> None:
        self.results_label.setText(title)
        _fill(self.results_table, [level_cells(level) for level in levels], 0)
        self.charts.show_levels(levels)

    # Controls --------------------------------------------------------------------------------------------

    @Slot()
    def _on_run_button_clicked(self) -> None:
        model = self.model_combo.currentText()
        if not model:
            self._show_error("Pick a model first.")
            return
        try:
            levels = parse_levels(self.concurrency_edit.text())
        except ValueError as exc:
            self._show_error(str(exc))
            return
        prompt, output = self.prompt_spin.value(), self.output_spin.value()
        mode = self.prompt_mode
        requests = None if mode == "multi-turn" else self.requests_spin.value() or None
        prompts: dict[str, int | str | None] = {"prompt_mode": mode, "seed": self.seed_spin.value()}
        if mode == "shared-prefix":
            prompts["prefix_tokens"] = self.prefix_spin.value()
        if mode == "multi-turn":
            prompts.update(turns=self.turns_spin.value(), conversations=self.conversations_spin.value() or None)
        self.run_button.setEnabled(False)  # until the service answers: one click, one run
        self.status_label.setText(f"Asking the service to benchmark {model}\N{HORIZONTAL ELLIPSIS}")
        self._connection.call(
            lambda client: client.start_bench(model, levels, prompt, output, requests, **prompts),
            self.show_run,
            self._on_start_failed,
        )

    def _on_start_failed(self, message: str) -> None:
        self._set_running(self.is_running)
        self._show_error(message)

    @Slot()
    def _on_cancel_button_clicked(self) -> None:
        self.cancel_button.setEnabled(False)
        self.status_label.setText("Cancelling\N{HORIZONTAL ELLIPSIS}")
        self._connection.call(lambda client: client.cancel_bench(), self.show_run, self._on_start_failed)

    @Slot()
    def _on_cards_table_selection_changed(self) -> None:
        chosen = self.selected_card_ids()
        self.compare_button.setEnabled(len(chosen) == 2)
        if len(chosen) == 1 and not self.is_running:
            card_id = chosen[0]
            self._card_call.run(lambda client: client.bench_card(card_id), self._on_card_loaded, self._show_error)

    def _on_card_loaded(self, card: BenchCardRecord) -> None:
        if not self.is_running:  # a run's live table wins over a card picked meanwhile
            mode = card["parameters"].get("prompt_mode") or "identical"  # cards before prompt modes: identical
            self._show_levels(f"Results: card {card['id']}, {mode} prompts", card["results"])

    def selected_card_ids(self) -> list[str]:
        rows = sorted({index.row() for index in self.cards_table.selectionModel().selectedRows()})
        return [str(self.cards[row]["id"]) for row in rows if row < len(self.cards)]

    @Slot()
    def _on_compare_button_clicked(self) -> None:
        chosen = self.selected_card_ids()
        if len(chosen) != 2:
            return
        first, second = chosen[1], chosen[0]  # listed newest first: compare older (A) with newer (B)
        self._compare_call.run(
            lambda client: client.compare_bench_cards(first, second),
            lambda rows: self._on_compared(first, second, rows),
            self._show_error,
        )

    def _on_compared(self, first: str, second: str, rows: list[list[str]]) -> None:
        self.compare_label.setText(f"A: {first}\nB: {second}")
        self.compare_table.setHorizontalHeaderLabels(["", "A", "B"])
        _fill(self.compare_table, rows, 1)

    def _show_error(self, message: str) -> None:
        self.status_label.setText(message)


__all__ = ["BenchmarkPage"]
