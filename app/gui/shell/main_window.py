"""ModelDeck's main window: models and engines, the endpoint, the selected engine's log and memory."""

from __future__ import annotations

import functools
import time
from collections import defaultdict, deque

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.api_types import LAUNCHABLE, DownloadRecord, EndpointRecord, EngineEvent, ModelRecord, ModelState
from app.gui.bench.benchmark_page import BenchmarkPage
from app.gui.chat.chat_page import ChatPage
from app.gui.chat.chat_store import FILE_NAME as CHATS_FILE
from app.gui.chat.chat_store import ChatStore
from app.gui.common.endpoint_panel import EndpointPanel
from app.gui.common.gui_state import GuiState
from app.gui.common.model_item_model import ModelItemModel
from app.gui.common.model_list_panel import ModelListPanel
from app.gui.connection.service_connection import Phase, ServiceConnection
from app.gui.dashboard.dashboard_panel import DashboardPanel
from app.gui.home.home_page import HomePage
from app.gui.models.discover_page import DiscoverPage
from app.gui.models.library_page import LibraryPage
from app.gui.run.diagnosis_panel import DiagnosisPanel
from app.gui.run.log_panel import MAX_LINES, LogPanel
from app.gui.run.memory_chart import MemoryChartPanel
from app.gui.run.snippets_panel import SnippetsPanel
from app.gui.settings.settings_page import SettingsPage
from app.gui.shell.about_dialog import AboutDialog
from app.gui.shell.app_icon import app_icon
from app.gui.shell.close_flow import CloseFlow
from app.gui.shell.notifications import NotificationBanner, Notifier
from app.gui.shell.tray import TrayController, show_window
from app.gui.wizard.wizard_dialog import SetupWizardDialog

MEMORY_HISTORY = 600  # samples: ten minutes at one poll a second


def one_line(message: str) -> str:
    """A multi-line message for the status bar: its headline and its last line, which usually says why."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0]} {lines[-1]}"


class MainWindow(QMainWindow):
    """The first window of ModelDeck. Everything it shows comes from a `ServiceConnection`."""

    sig_window_closed = Signal()  # the window really closed (not hidden to the tray): the application may quit

    def __init__(self, connection: ServiceConnection, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("ModelDeck")
        self.setWindowIcon(app_icon())
        self.resize(1100, 720)
        self._connection = connection
        self.close_flow = CloseFlow(self)  # first, as before: it reads the close-to-tray choice from the settings
        self._logs: defaultdict[str, deque[str]] = defaultdict(lambda: deque(maxlen=MAX_LINES))
        self._logs_requested: set[str] = set()
        self._memory: defaultdict[str, deque[tuple[float, float]]] = defaultdict(lambda: deque(maxlen=MEMORY_HISTORY))

        self.item_model = ModelItemModel(self)
        self.model_list_panel = ModelListPanel(self.item_model)
        self.gui_state = GuiState(connection.paths)
        self.endpoint_panel = EndpointPanel(self.gui_state)
        self.log_panel = LogPanel()
        self.diagnosis_panel = DiagnosisPanel()
        self.snippets_panel = SnippetsPanel()
        self.tray = TrayController(self.item_model, self)
        self.memory_chart_panel = MemoryChartPanel()
        self.dashboard_panel = DashboardPanel(connection)
        self.benchmark_page = BenchmarkPage(connection)
        self.dashboard_action = QAction("&Dashboard", self)
        self.dashboard_action.setToolTip("Live throughput, latency, CPU, memory and GPU charts of every model")
        self.connection_label = QLabel("Not connected")
        self.reconnect_button = QPushButton("Reconnect")
        self.reconnect_button.setAccessibleName("Reconnect to the service, or start it")
        self.reconnect_button.setToolTip("Connect to the ModelDeck service again, starting it if it is not running")
        self.reconnect_button.hide()  # shown while the connection is lost
        self.tabs = QTabWidget()
        self.home_page = HomePage(connection, self.item_model, self.gui_state)
        self.run_page = QSplitter(Qt.Orientation.Horizontal)
        self.notification_banner = NotificationBanner()
        self.notifier = Notifier(self.notification_banner, self.tray.icon, self)
        self.library_page = LibraryPage(connection)
        self.discover_page = DiscoverPage(connection)
        self.chat_store = ChatStore(connection.paths.data / CHATS_FILE)
        self.chat_page = ChatPage(connection, self.item_model, self.chat_store)
        self.setup_action = QAction("Set up a model\N{HORIZONTAL ELLIPSIS}", self)
        self.setup_action.setToolTip("See what this machine can run, and launch a model with the settings that fit")
        self.setup_action.setEnabled(False)
        self.setup_dialog: SetupWizardDialog | None = None  # created when first asked for, then reused
        self.settings_page = SettingsPage(connection)
        self.about_action = QAction("&About ModelDeck", self)
        self.about_action.setToolTip("Version, build commit and engines")
        self.about_dialog: AboutDialog | None = None  # created when first asked for, then reused
        self.quit_action = QAction("&Quit", self)
        self.quit_action.setShortcut(QKeySequence.StandardKey.Quit)
        self.quit_action.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
        self.quit_action.setToolTip("Quit ModelDeck, choosing whether the engines keep serving")
        self._build_layout()
        self._connect_signals()
        if self.chat_store.problem:
            self.statusBar().showMessage(f"Chats: {self.chat_store.problem}")

    def _build_layout(self) -> None:
        details = QSplitter(Qt.Orientation.Vertical)
        details.addWidget(self.log_panel)
        details.addWidget(self.memory_chart_panel)
        details.setStretchFactor(0, 3)
        details.setStretchFactor(1, 1)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.addWidget(self.endpoint_panel)
        right_layout.addWidget(self.snippets_panel)
        right_layout.addWidget(self.diagnosis_panel)
        right_layout.addWidget(details, 1)
        # The right side scrolls rather than setting a minimum height that a 1080p screen at 200 % cannot show.
        right_scroll = QScrollArea()
        right_scroll.setWidgetResizable(True)
        right_scroll.setFrameShape(QFrame.Shape.NoFrame)
        right_scroll.setWidget(right)
        run_page = self.run_page
        run_page.addWidget(self.model_list_panel)
        run_page.addWidget(right_scroll)
        run_page.setStretchFactor(1, 2)
        run_page.setSizes([420, 680])  # room for the model list's four columns
        self.tabs.addTab(self.home_page, "H&ome")
        self.tabs.addTab(self.library_page, "&Models")
        self.tabs.addTab(self.discover_page, "&Discover")
        self.tabs.addTab(run_page, "&Run")
        self.tabs.addTab(self.dashboard_panel, "Da&shboard")
        self.tabs.addTab(self.benchmark_page, "&Benchmark")
        self.tabs.addTab(self.chat_page, "C&hat")
        self.tabs.addTab(self.settings_page, "Se&ttings")
        self.tabs.setAccessibleName("Pages")
        central = QWidget()
        central_layout = QVBoxLayout(central)
        central_layout.setContentsMargins(0, 0, 0, 0)
        central_layout.addWidget(self.notification_banner)
        central_layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self._add_tab_shortcuts()
        self.statusBar().addPermanentWidget(self.connection_label)
        self.statusBar().addPermanentWidget(self.reconnect_button)
        self.menuBar().addMenu("&File").addAction(self.quit_action)
        self.menuBar().addMenu("&Models").addAction(self.setup_action)
        self.menuBar().addMenu("&View").addAction(self.dashboard_action)
        self.menuBar().addMenu("&Help").addAction(self.about_action)
        toolbar = self.addToolBar("Main")
        toolbar.setObjectName("main_toolbar")
        toolbar.setMovable(False)
        toolbar.addAction(self.setup_action)
        toolbar.addAction(self.dashboard_action)
        for action, name in ((self.setup_action, "Set up a model"), (self.dashboard_action, "Open the dashboard")):
            button = toolbar.widgetForAction(action)
            if button is not None:
                button.setAccessibleName(name)

    def _add_tab_shortcuts(self) -> None:
        """Ctrl+1..N switch to the N-th page, whatever pages other branches add."""
        for index in range(min(self.tabs.count(), 9)):
            shortcut = QShortcut(QKeySequence(f"Ctrl+{index + 1}"), self)
            shortcut.activated.connect(functools.partial(self.tabs.setCurrentIndex, index))
            name = self.tabs.tabText(index).replace("&", "")
            self.tabs.setTabToolTip(index, f"{name} (Ctrl+{index + 1})")

    def _connect_signals(self) -> None:
        connection = self._connection
        connection.sig_endpoint_received.connect(self.chat_page.set_endpoint)
        self.chat_page.sig_save_failed.connect(self._on_chat_page_save_failed)
        self.chat_page.sig_save_resumed.connect(self._on_chat_page_save_resumed)
        connection.sig_endpoint_received.connect(self.snippets_panel.set_endpoint)
        self.model_list_panel.sig_selection_changed.connect(self.snippets_panel.set_model)
        self.home_page.sig_start_requested.connect(self._on_model_list_launch_requested)
        self.home_page.sig_stop_requested.connect(self._on_model_list_stop_requested)
        self.home_page.sig_snippets_requested.connect(self._on_home_page_snippets_requested)
        self.home_page.sig_chat_requested.connect(self._on_home_page_chat_requested)
        self.home_page.next_step_panel.sig_text_copied.connect(self._on_endpoint_text_copied)
        connection.sig_engine_changed.connect(self.notifier.on_engine_changed)
        self.snippets_panel.sig_text_copied.connect(self._on_endpoint_text_copied)
        self.tray.sig_start_requested.connect(self._on_model_list_launch_requested)
        self.tray.sig_stop_requested.connect(self._on_model_list_stop_requested)
        self.tray.sig_open_requested.connect(functools.partial(show_window, self))
        self.tray.sig_quit_requested.connect(self.quit)
        self.quit_action.triggered.connect(self.quit)
        self.reconnect_button.clicked.connect(connection.reconnect)
        self.settings_page.sig_settings_applied.connect(self.close_flow.on_settings_applied)
        self.item_model.dataChanged.connect(self._show_diagnosis)
        self.item_model.modelReset.connect(self._show_diagnosis)
        self.item_model.rowsInserted.connect(self._show_diagnosis)
        self.model_list_panel.sig_selection_changed.connect(self._show_diagnosis)
        self.diagnosis_panel.sig_relaunch_requested.connect(self._on_diagnosis_panel_relaunch_requested)
        connection.sig_status_changed.connect(self._on_connection_status_changed)
        connection.sig_error_occurred.connect(self._on_connection_error_occurred)
        connection.sig_models_received.connect(self._on_connection_models_received)
        connection.sig_usage_received.connect(self._on_connection_usage_received)
        connection.sig_engine_changed.connect(self._on_connection_engine_changed)
        connection.sig_model_call_ended.connect(self._on_connection_model_call_ended)
        connection.sig_log_received.connect(self._on_connection_log_received)
        connection.sig_logs_loaded.connect(self._on_connection_logs_loaded)
        connection.sig_endpoint_received.connect(self._on_connection_endpoint_received)
        connection.sig_connection_closed.connect(self.close_flow.on_connection_closed)
        panel = self.model_list_panel
        panel.sig_selection_changed.connect(self._on_model_list_selection_changed)
        panel.sig_launch_requested.connect(self._on_model_list_launch_requested)
        panel.sig_stop_requested.connect(self._on_model_list_stop_requested)
        self.endpoint_panel.sig_text_copied.connect(self._on_endpoint_text_copied)
        self.setup_action.triggered.connect(self._on_setup_action_triggered)
        self.discover_page.downloads_panel.sig_download_finished.connect(self._on_downloads_panel_download_finished)
        self.discover_page.downloads_panel.sig_download_finished.connect(self.notifier.on_download_finished)
        self.dashboard_action.triggered.connect(self._on_dashboard_action_triggered)
        self.about_action.triggered.connect(self._on_about_action_triggered)
        self.dashboard_panel.sig_exported.connect(self._on_dashboard_panel_exported)

    @property
    def connection(self) -> ServiceConnection:
        return self._connection

    # From the connection -------------------------------------------------------------------------------

    @Slot(str)
    def _on_connection_status_changed(self, status: str) -> None:
        self.connection_label.setText(status)
        self.model_list_panel.set_actions_enabled(self._connection.is_connected)
        self.setup_action.setEnabled(self._connection.is_connected)
        self.reconnect_button.setVisible(self._connection.phase is Phase.LOST)
        if self._connection.is_connected:
            self.discover_page.downloads_panel.refresh()
        else:
            self.item_model.forget_states()  # known again with the snapshot of the service connected next

    @Slot(str)
    def _on_connection_error_occurred(self, message: str) -> None:
        self.statusBar().showMessage(one_line(message))
        self.statusBar().setToolTip(message)

    @Slot(object)
    def _on_connection_models_received(self, models: list[ModelRecord]) -> None:
        self.item_model.set_models(models)

    @Slot(object)
    def _on_connection_usage_received(self, models: list[ModelRecord]) -> None:
        self.item_model.update_usage(models)
        now = time.monotonic()
        for model in models:
            if (rss := model.get("rss_bytes")) is not None:
                self._memory[model["id"]].append((now, float(rss)))
        selected = self.model_list_panel.selected_model_id()
        if selected:
            self._show_memory(selected)

    @Slot(object)
    def _on_connection_engine_changed(self, event: EngineEvent) -> None:
        self.item_model.apply_engine_event(event)
        model_id, state = event["model_id"], event["state"]
        if state == ModelState.STARTING and event["previous"] in LAUNCHABLE:
            self._memory[model_id].clear()  # a new run: its memory starts from nothing
        if state == ModelState.FAILED:
            self.statusBar().showMessage(one_line(f"{model_id} failed: {event.get('message') or 'no reason given'}"))
        self._on_connection_model_call_ended(model_id)

    @Slot(str)
    def _on_connection_model_call_ended(self, model_id: str) -> None:
        """Launch and Stop of the model work again (its engine changed state, or the call was answered)."""
        self.model_list_panel.settle(model_id)
        self.home_page.settle(model_id)

    @Slot(str, str)
    def _on_connection_log_received(self, model_id: str, line: str) -> None:
        self._logs[model_id].append(line)
        if model_id == self.model_list_panel.selected_model_id():
            self.log_panel.append_line(line)

    @Slot(str, object)
    def _on_connection_logs_loaded(self, model_id: str, lines: list[str]) -> None:
        buffer = self._logs[model_id]
        # Lines streamed in while the tail was on its way are newer than the tail; keep them rather than
        # risk showing a line twice.
        if buffer:
            return
        buffer.extend(lines)
        if model_id == self.model_list_panel.selected_model_id():
            self._show_log(model_id)

    @Slot(object)
    def _on_connection_endpoint_received(self, info: EndpointRecord) -> None:
        note = str(info.get("key_note") or "")
        self.endpoint_panel.set_endpoint(str(info["url"]), info.get("api_key"), note)

    # From the panels -----------------------------------------------------------------------------------

    @Slot(str)
    def _on_model_list_selection_changed(self, model_id: str) -> None:
        if not model_id:
            self.log_panel.show_lines("Engine log", [])
            self.memory_chart_panel.show_samples("Resident memory", [], [])
            return
        self._show_log(model_id)
        self._show_memory(model_id)
        if not self._logs[model_id] and model_id not in self._logs_requested:
            self._logs_requested.add(model_id)
            self._connection.load_logs(model_id)

    @Slot(str)
    def _on_model_list_launch_requested(self, model_id: str) -> None:
        self.statusBar().showMessage(f"Launching {model_id}\N{HORIZONTAL ELLIPSIS}", 5000)
        self._connection.start_model(model_id)

    @Slot(str)
    def _on_model_list_stop_requested(self, model_id: str) -> None:
        self.statusBar().showMessage(f"Stopping {model_id}\N{HORIZONTAL ELLIPSIS}", 5000)
        self._connection.stop_model(model_id)

    @Slot(str)
    def _on_endpoint_text_copied(self, what: str) -> None:
        self.statusBar().showMessage(f"Copied the {what} to the clipboard.", 3000)

    @Slot(object)
    def _on_downloads_panel_download_finished(self, record: DownloadRecord) -> None:
        self.statusBar().showMessage(
            f"Downloaded {record['repo']} ({record['variant']}): {record['model_id']} is in the library.", 10_000
        )

    @Slot()
    def _on_about_action_triggered(self) -> None:
        if self.about_dialog is None:
            self.about_dialog = AboutDialog(self._connection, self)
        self.about_dialog.refresh()
        self.about_dialog.show()

    def _on_setup_action_triggered(self) -> None:
        dialog = self.setup_dialog
        if dialog is None:
            dialog = self.setup_dialog = SetupWizardDialog(self._connection, self)
            dialog.sig_model_launched.connect(self._on_setup_dialog_model_launched)
        elif dialog.isVisible():  # open behind the window: bring it back where it was
            dialog.raise_()
            dialog.activateWindow()
            return
        else:
            dialog.restart()
        dialog.show()

    @Slot(str)
    def _on_home_page_chat_requested(self, _model_id: str) -> None:
        self.tabs.setCurrentWidget(self.chat_page)

    @Slot(str)
    def _on_chat_page_save_failed(self, message: str) -> None:
        self.statusBar().showMessage(f"Chats: {message}")  # kept until the chats are saved again

    @Slot()
    def _on_chat_page_save_resumed(self) -> None:
        self.statusBar().showMessage("Chats: saved.", 5000)

    @Slot()
    def _on_home_page_snippets_requested(self) -> None:
        self.tabs.setCurrentWidget(self.run_page)

    @Slot()
    def _on_dashboard_action_triggered(self) -> None:
        self.tabs.setCurrentWidget(self.dashboard_panel)

    @Slot(str)
    def _on_dashboard_panel_exported(self, message: str) -> None:
        self.statusBar().showMessage(message, 5000)

    @Slot(str)
    def _on_setup_dialog_model_launched(self, model_id: str) -> None:
        self.model_list_panel.select_model(model_id)
        self.statusBar().showMessage(f"{model_id} is ready.", 5000)

    @Slot()
    def _show_diagnosis(self) -> None:
        # Item-model signals carry arguments of their own: the selection, not them, says which model to show.
        selected = self.model_list_panel.selected_model_id()
        if selected is None or self.item_model.state_of(selected) is None:  # None too while the service is gone
            self.diagnosis_panel.show_record(None)
        else:
            self.diagnosis_panel.show_record(self.item_model.record(selected))

    @Slot(str, object)
    def _on_diagnosis_panel_relaunch_requested(self, model_id: str, overrides: dict[str, int]) -> None:
        self.statusBar().showMessage(f"Relaunching {model_id} with {overrides}\N{HORIZONTAL ELLIPSIS}")
        self._connection.call(
            lambda client: client.start_model(model_id, overrides=overrides),
            lambda _record: None,
            self._on_connection_error_occurred,
        )

    def _show_log(self, model_id: str) -> None:
        self.log_panel.show_lines(f"Engine log: {model_id}", self._logs[model_id])

    def _show_memory(self, model_id: str) -> None:
        samples = self._memory[model_id]
        self.memory_chart_panel.show_samples(
            f"Resident memory: {model_id}", [t for t, _ in samples], [rss for _, rss in samples]
        )

    # Closing: the close flow decides -------------------------------------------------------------------

    @Slot()
    def quit(self) -> None:
        """File > Quit and the tray's Quit: close for real, asking whether the engines keep serving."""
        self.close_flow.quit()

    def quit_without_asking(self, stop_service: bool | None = None) -> None:
        """Quit with no question (Ctrl+C in the terminal): `stop_service` as ServiceConnection.close takes it."""
        self.close_flow.quit_without_asking(stop_service)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.close_flow.handle(event)
