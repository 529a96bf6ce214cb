"""Home, the first page: the machine at a glance, what is running (start and stop), the endpoint, and on first
run a one-click start of the bundled model."""

from __future__ import annotations

import itertools

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QGroupBox,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.api_types import HAS_ENGINE, EndpointRecord, HardwareRecord, ModelRecord, ModelState
from app.client import ControlClient
from app.gui.common.endpoint_panel import EndpointPanel
from app.gui.common.gui_state import GuiState
from app.gui.common.hub_format import error_label, show_error
from app.gui.common.model_item_model import SIZE_COLUMN, ModelItemModel
from app.gui.common.model_list_panel import ModelListPanel
from app.gui.common.plan_text import hardware_rows, problems_html, rows_html
from app.gui.common.state_words import STATE_WORDS
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection
from app.gui.home.first_run_panel import FirstRunPanel, bundled_record
from app.gui.home.next_step_panel import NextStepPanel

UNKNOWN_RUNNING = "Not connected to the service: which models run is unknown until it is back."
NARROW_WIDTH = 900  # logical pixels: below this, the machine and the endpoint are stacked


def running_text(models: list[ModelRecord]) -> str:
    """What runs, in one sentence: 'Running: a (ready), b (starting).' or 'No model is running.'"""
    active = [m for m in models if m["state"] in HAS_ENGINE]
    if not active:
        return "No model is running. Select one below and press Launch."
    by_word: dict[str, list[str]] = {}
    for m in active:
        by_word.setdefault(STATE_WORDS.get(str(m["state"]), str(m["state"])), []).append(str(m["id"]))
    return " ".join(f"{word}: {', '.join(ids)}." for word, ids in by_word.items())


class HomePage(QWidget):
    """Shows and starts; every service call goes through the connection (pool threads), never the GUI thread."""

    sig_start_requested = Signal(str)  # model id: the window launches it as any other launch
    sig_stop_requested = Signal(str)
    sig_snippets_requested = Signal()  # the user wants the code snippets (on the Run page)
    sig_chat_requested = Signal(str)  # model id: the user wants to chat with it

    def __init__(
        self, connection: ServiceConnection, item_model: ModelItemModel, state: GuiState, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self._item_model = item_model
        self._state = state
        self._dismissed = False
        self._hardware_call = LatestCall(connection, self)
        self.first_run_panel = FirstRunPanel()
        self.hardware_label = QLabel("Looking at this machine\N{HORIZONTAL ELLIPSIS}")
        self.hardware_label.setAccessibleName("Hardware summary")
        self.hardware_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.hardware_label.setWordWrap(True)
        self.problems_label = QLabel()
        self.problems_label.setWordWrap(True)
        self.problems_label.setAccessibleName("GPU problems and advice")
        self.problems_label.hide()
        # Notes say nothing is wrong (no NVIDIA driver on a machine without an NVIDIA GPU): one line, folded.
        self.notes_button = QPushButton()
        self.notes_button.setCheckable(True)
        self.notes_button.setFlat(True)
        self.notes_button.setAccessibleName("Show the notes about GPU support")
        self.notes_button.hide()
        self.notes_label = QLabel()
        self.notes_label.setWordWrap(True)
        self.notes_label.setAccessibleName("Notes about GPU support")
        self.notes_label.hide()
        self.next_step_panel = NextStepPanel()
        self._endpoint_url: str | None = None
        self.hardware_error_label = error_label()
        self.detect_button = QPushButton("Detect again")
        self.detect_button.setAccessibleName("Detect the hardware again")
        self.endpoint_panel = EndpointPanel()
        self.snippets_button = QPushButton("Code snippets\N{HORIZONTAL ELLIPSIS}")
        self.snippets_button.setAccessibleName("Show code snippets for the endpoint")
        self.snippets_button.setToolTip("curl, Python and JavaScript code for the selected model (Run page)")
        self.running_label = QLabel()
        self.running_label.setWordWrap(True)
        self.running_label.setAccessibleName("What is running")
        self.model_list_panel = ModelListPanel(item_model)
        self.model_list_panel.table_view.setAccessibleName("Models and their states")
        self.model_list_panel.table_view.hideColumn(SIZE_COLUMN)
        self._build_layout()
        self._connect_signals()
        self._refresh()

    def _build_layout(self) -> None:
        machine = QGroupBox("This machine")
        machine_layout = QVBoxLayout(machine)
        machine_layout.addWidget(self.hardware_label)
        machine_layout.addWidget(self.problems_label)
        machine_layout.addWidget(self.notes_button, 0, Qt.AlignmentFlag.AlignLeft)
        machine_layout.addWidget(self.notes_label)
        machine_layout.addWidget(self.hardware_error_label)
        machine_layout.addStretch(1)
        machine_layout.addWidget(self.detect_button, 0, Qt.AlignmentFlag.AlignLeft)
        endpoint = QGroupBox("Endpoint")
        endpoint_layout = QVBoxLayout(endpoint)
        hint = QLabel("Any OpenAI client reaches every model here with this URL and key.")
        hint.setWordWrap(True)
        endpoint_layout.addWidget(hint)
        endpoint_layout.addWidget(self.endpoint_panel)
        endpoint_layout.addWidget(self.snippets_button, 0, Qt.AlignmentFlag.AlignLeft)
        endpoint_layout.addStretch(1)
        models = QGroupBox("Models")
        models_layout = QVBoxLayout(models)
        models_layout.addWidget(self.running_label)
        models_layout.addWidget(self.model_list_panel, 1)
        self._machine_box, self._endpoint_box = machine, endpoint
        grid = self._top_grid = QGridLayout()
        self._place_top(side_by_side=True)
        content = QWidget()
        content_layout = QVBoxLayout(content)
        content_layout.addWidget(self.first_run_panel)
        content_layout.addWidget(self.next_step_panel)
        content_layout.addLayout(grid)
        content_layout.addWidget(models, 1)
        # At 200 % scaling or in a small window the page scrolls instead of squeezing its text.
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(scroll)
        # Keyboard order follows reading order: the offer, the machine, the endpoint, then the models.
        order = [
            self.first_run_panel.start_button,
            self.first_run_panel.dismiss_button,
            self.next_step_panel.chat_button,
            self.next_step_panel.copy_button,
            self.notes_button,
            self.detect_button,
            self.endpoint_panel.url_edit,
            self.endpoint_panel.copy_url_button,
            self.endpoint_panel.key_edit,
            self.endpoint_panel.reveal_button,
            self.endpoint_panel.copy_key_button,
            self.snippets_button,
            self.model_list_panel.table_view,
            self.model_list_panel.launch_button,
            self.model_list_panel.stop_button,
        ]
        for first, second in itertools.pairwise(order):
            QWidget.setTabOrder(first, second)

    def _place_top(self, side_by_side: bool) -> None:
        """The machine and the endpoint side by side, or one above the other in a narrow window."""
        grid = self._top_grid
        grid.removeWidget(self._machine_box)
        grid.removeWidget(self._endpoint_box)
        grid.addWidget(self._machine_box, 0, 0)
        grid.addWidget(self._endpoint_box, 0 if side_by_side else 1, 1 if side_by_side else 0)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1 if side_by_side else 0)
        self._side_by_side = side_by_side

    @property
    def side_by_side(self) -> bool:
        return self._side_by_side

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        side_by_side = event.size().width() >= NARROW_WIDTH
        if side_by_side != self._side_by_side:
            self._place_top(side_by_side)

    def _connect_signals(self) -> None:
        connection = self._connection
        connection.sig_status_changed.connect(self._on_connection_status_changed)
        connection.sig_endpoint_received.connect(self._on_connection_endpoint_received)
        self._item_model.dataChanged.connect(self._refresh)
        self._item_model.modelReset.connect(self._refresh)
        self._item_model.rowsInserted.connect(self._refresh)
        self.first_run_panel.sig_start_requested.connect(self._on_first_run_start_requested)
        self.first_run_panel.sig_dismissed.connect(self._on_first_run_dismissed)
        self.model_list_panel.sig_launch_requested.connect(self.sig_start_requested)
        self.model_list_panel.sig_stop_requested.connect(self.sig_stop_requested)
        self.detect_button.clicked.connect(self._on_detect_button_clicked)
        self.snippets_button.clicked.connect(self.sig_snippets_requested)
        self.notes_button.toggled.connect(self._on_notes_button_toggled)
        self.next_step_panel.sig_chat_requested.connect(self.sig_chat_requested)

    def settle(self, model_id: str) -> None:
        """A launch or stop asked from this page ended: the engine changed state."""
        self.model_list_panel.settle(model_id)

    @property
    def first_run_shown(self) -> bool:
        return not self.first_run_panel.isHidden()

    # Hardware --------------------------------------------------------------------------------------------

    def load_hardware(self) -> None:
        self.detect_button.setEnabled(False)
        show_error(self.hardware_error_label, "")
        self._hardware_call.run(ControlClient.hardware, self._on_hardware_loaded, self._on_hardware_failed)

    def _on_hardware_loaded(self, profile: HardwareRecord) -> None:
        self.detect_button.setEnabled(True)
        self.hardware_label.setText(rows_html(hardware_rows(profile)))
        self.show_gpu_problems(profile)

    def show_gpu_problems(self, profile: HardwareRecord) -> None:
        """Problems open, each with its advice; notes (nothing is wrong) folded behind one line."""
        problems = problems_html(profile, "problem")
        self.problems_label.setText(problems)
        self.problems_label.setVisible(bool(problems))
        notes = problems_html(profile, "note")
        count = sum(1 for p in profile.get("gpu_problems", []) if p.get("severity") == "note")
        self.notes_label.setText(notes)
        self.notes_button.setText(f"{count} note{'s' * (count != 1)} on GPU support: nothing to fix")
        self.notes_button.setVisible(bool(notes))
        self.notes_label.setVisible(bool(notes) and self.notes_button.isChecked())

    @Slot(bool)
    def _on_notes_button_toggled(self, shown: bool) -> None:
        self.notes_label.setVisible(shown)

    def _on_hardware_failed(self, message: str) -> None:
        self.detect_button.setEnabled(self._connection.is_connected)
        self.hardware_label.setText("")
        show_error(self.hardware_error_label, f"Could not read this machine's hardware: {message}")

    @Slot()
    def _on_detect_button_clicked(self) -> None:
        self.load_hardware()

    # From the connection and the item model -------------------------------------------------------------

    @Slot(str)
    def _on_connection_status_changed(self, _status: str) -> None:
        connected = self._connection.is_connected
        self.model_list_panel.set_actions_enabled(connected)
        if connected and self.hardware_label.text().endswith("\N{HORIZONTAL ELLIPSIS}"):
            self.load_hardware()
        if not connected:
            self.endpoint_panel.set_endpoint(None, None)
        self._refresh()

    @Slot(object)
    def _on_connection_endpoint_received(self, info: EndpointRecord) -> None:
        self.endpoint_panel.set_endpoint(str(info["url"]), info.get("api_key"), str(info.get("key_note") or ""))
        self._endpoint_url = str(info["url"])
        self._refresh()

    @Slot()
    def _refresh(self) -> None:
        models = [r for r in (self._item_model.record(i) for i in self._item_model.model_ids()) if r is not None]
        known = self._item_model.states_known
        if not models:
            self.running_label.setText("Waiting for the service's model list.")
        else:
            self.running_label.setText(running_text(models) if known else UNKNOWN_RUNNING)
        ready = next((str(m["id"]) for m in models if m["state"] == ModelState.READY), None) if known else None
        self.next_step_panel.show_ready(ready if self._connection.is_connected else None, self._endpoint_url)
        if ready is not None:
            self._state.mark_launched()  # from here, from the Run page, the tray or another client alike
        self.first_run_panel.set_bundled(bundled_record(models) if known else None, self._connection.is_connected)
        # Shown until some model has been ready once; while the offer's own launch is under way it stays, so the
        # user sees it through, and it goes when that model is ready.
        self.first_run_panel.setVisible(not self._dismissed and not self._state.ever_launched)

    # From the first-run panel ----------------------------------------------------------------------------

    @Slot(str)
    def _on_first_run_start_requested(self, model_id: str) -> None:
        # Called here rather than through the window, so that a refused launch re-enables the offer's button.
        self._connection.call(
            lambda client: client.start_model(model_id), lambda _record: None, self.first_run_panel.launch_failed
        )

    @Slot()
    def _on_first_run_dismissed(self) -> None:
        self._dismissed = True
        self._refresh()
