"""The window against the real service on the bundled model: launch, log, endpoint, stop, close, copy."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLineEdit
from pytestqt.qtbot import QtBot

from app.client import default_port
from app.gui.common.hub_format import row_key
from app.gui.common.model_item_model import MEMORY_COLUMN, STATE_COLUMN
from app.gui.connection.event_stream import STOP_WAIT_MS
from app.gui.connection.service_connection import Phase, ServiceConnection
from app.gui.models.library_page import COLUMNS
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.gui.conftest import API_KEY, CLOSE_TIMEOUT_MS, CONNECT_TIMEOUT_MS
from tests.support.service import RunningService

READY_TIMEOUT_MS = 60_000
STOP_TIMEOUT_MS = 30_000
EVENT_STREAM_STOP_S = STOP_WAIT_MS / 1000 / 2


def test_launch_stop_and_close_the_bundled_model(
    qtbot: QtBot, main_window: MainWindow, endpoint_port: int, paths: AppPaths
) -> None:
    window, connection = main_window, main_window.connection
    models, panel = window.item_model, window.model_list_panel
    assert connection.started_service
    process = connection.service_process
    assert process is not None
    assert process.poll() is None

    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    panel.select_model(BUNDLED_ID)
    assert panel.selected_model_id() == BUNDLED_ID
    qtbot.waitUntil(panel.launch_button.isEnabled)
    assert not panel.stop_button.isEnabled()

    qtbot.mouseClick(panel.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    assert "Running" in panel.state_label.text()
    qtbot.waitUntil(panel.stop_button.isEnabled)
    assert not panel.launch_button.isEnabled()
    # The engine's own output (llama.cpp loading the file, then its HTTP server) reaches the log panel; the
    # loader's debug lines behind the level filter, shown when asked for.
    qtbot.waitUntil(lambda: "Uvicorn running on" in window.log_panel.plain_text())
    assert "llama_model_loader" not in window.log_panel.plain_text() and window.log_panel.hidden_count() > 10
    window.log_panel.set_minimum_level("debug")
    qtbot.waitUntil(lambda: "llama_model_loader" in window.log_panel.plain_text())
    window.log_panel.set_minimum_level("info")

    # The URL shown is the service's, and it serves the model with the key shown.
    url = f"http://127.0.0.1:{endpoint_port}/v1"
    qtbot.waitUntil(lambda: window.endpoint_panel.url_edit.text() == url)
    response = httpx.get(f"{url}/models", headers={"Authorization": f"Bearer {API_KEY}"}, trust_env=False)
    assert response.status_code == 200
    assert BUNDLED_ID in [m["id"] for m in response.json()["data"]]

    # Resident memory is polled and charted for the selected engine. Samples from while the engine started may be
    # small (a process that has not loaded the model yet); the ones taken once it is ready hold the model.
    charted = len(window.memory_chart_panel.curve_data()[1])
    qtbot.waitUntil(lambda: len(window.memory_chart_panel.curve_data()[1]) >= max(2, charted + 1), timeout=10_000)
    record = models.record(BUNDLED_ID)
    assert record is not None
    assert record["rss_bytes"] > 10 * 1024 * 1024
    assert window.memory_chart_panel.curve_data()[1][-1] > 10
    # The service's check of the memory prediction is shown beside the measurement.
    memory_index = models.index(models.row_of(BUNDLED_ID), MEMORY_COLUMN)
    qtbot.waitUntil(lambda: "prediction" in str(models.data(memory_index)), timeout=10_000)
    assert "Predicted at load" in str(models.data(memory_index, Qt.ItemDataRole.ToolTipRole))

    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped", timeout=STOP_TIMEOUT_MS)
    qtbot.waitUntil(panel.launch_button.isEnabled)

    window.close()
    qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
    assert process.poll() == 0  # the service exited by itself, after its shutdown request
    qtbot.waitUntil(lambda: not window.isVisible())
    assert not paths.service_file.exists()


def test_copy_buttons_put_url_and_key_on_the_clipboard(
    qtbot: QtBot, main_window: MainWindow, endpoint_port: int
) -> None:
    endpoint = main_window.endpoint_panel
    url = f"http://127.0.0.1:{endpoint_port}/v1"
    qtbot.waitUntil(lambda: endpoint.url_edit.text() == url)
    clipboard = QGuiApplication.clipboard()

    clipboard.setText("something else")
    qtbot.mouseClick(endpoint.copy_url_button, Qt.MouseButton.LeftButton)
    assert clipboard.text() == url

    # The key is masked until revealed, and copied in full either way.
    assert endpoint.key_edit.echoMode() == QLineEdit.EchoMode.Password
    assert endpoint.key_edit.displayText() != API_KEY
    qtbot.mouseClick(endpoint.copy_key_button, Qt.MouseButton.LeftButton)
    assert clipboard.text() == API_KEY
    qtbot.mouseClick(endpoint.reveal_button, Qt.MouseButton.LeftButton)
    assert endpoint.key_edit.displayText() == API_KEY
    qtbot.mouseClick(endpoint.reveal_button, Qt.MouseButton.LeftButton)
    assert endpoint.key_edit.echoMode() == QLineEdit.EchoMode.Password


def test_a_failed_engine_shows_its_message(qtbot: QtBot, paths: AppPaths, endpoint_port: int) -> None:
    # A file that is not GGUF: the service lists it, and refuses it when it is launched.
    paths.models_dir.mkdir(parents=True)
    (paths.models_dir / "broken.gguf").write_bytes(b"this is not a model" * 100)
    connection = ServiceConnection(paths, default_port())
    window = MainWindow(connection)
    qtbot.addWidget(window)
    window.show()
    connection.open()
    models, panel = window.item_model, window.model_list_panel
    try:
        qtbot.waitUntil(lambda: models.state_of("broken") == "stopped", timeout=CONNECT_TIMEOUT_MS)
        panel.select_model("broken")
        qtbot.waitUntil(panel.launch_button.isEnabled)
        qtbot.mouseClick(panel.launch_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: models.state_of("broken") == "failed")
        record = models.record("broken")
        assert record is not None
        message = record["message"]
        assert "broken.gguf" in message
        assert "Failed" in panel.state_label.text()
        assert message in panel.state_label.text()
        state_index = models.index(models.row_of("broken"), STATE_COLUMN)
        assert models.data(state_index, Qt.ItemDataRole.ToolTipRole) == message
        assert "broken failed" in window.statusBar().currentMessage()
        qtbot.waitUntil(panel.launch_button.isEnabled)  # a failed engine can be launched again
    finally:
        window.close()
        qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)


def test_a_refused_launch_leaves_launch_working(qtbot: QtBot, main_window: MainWindow) -> None:
    """The window's list can be a moment behind the service (a model deleted from another client): a Launch the
    service refuses changes no engine's state, so no engine event comes, and Launch must still work after it."""
    window, models, panel = main_window, main_window.item_model, main_window.model_list_panel
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    listed = [record for model_id in models.model_ids() if (record := models.record(model_id)) is not None]
    models.set_models([*listed, {**listed[0], "id": "gone"}])
    panel.select_model("gone")
    qtbot.waitUntil(panel.launch_button.isEnabled)

    qtbot.mouseClick(panel.launch_button, Qt.MouseButton.LeftButton)
    assert not panel.launch_button.isEnabled()  # asked, not yet answered
    qtbot.waitUntil(lambda: "Could not launch gone" in window.statusBar().currentMessage())
    qtbot.waitUntil(panel.launch_button.isEnabled)
    assert models.state_of("gone") == "stopped"


def test_reconnect_after_the_service_died(qtbot: QtBot, main_window: MainWindow) -> None:
    window, connection, models = main_window, main_window.connection, main_window.item_model
    first = connection.service_process
    assert first is not None
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    assert window.reconnect_button.isHidden()

    first.kill()  # no shutdown: it withdraws nothing, its discovery file stays behind
    qtbot.waitUntil(lambda: connection.phase is Phase.LOST)
    assert not window.reconnect_button.isHidden()
    qtbot.mouseClick(window.reconnect_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: connection.is_connected or connection.phase is Phase.LOST, timeout=CONNECT_TIMEOUT_MS)
    assert connection.is_connected, window.statusBar().currentMessage()
    assert window.reconnect_button.isHidden()
    second = connection.service_process
    assert second is not None and second.pid != first.pid and second.poll() is None  # started again, and ours

    # The window works on the new service as on the first.
    panel = window.model_list_panel
    panel.select_model(BUNDLED_ID)
    qtbot.waitUntil(panel.launch_button.isEnabled)
    qtbot.mouseClick(panel.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    window.close()
    qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
    assert second.poll() == 0


def test_states_read_unknown_while_the_service_is_lost(qtbot: QtBot, main_window: MainWindow) -> None:
    window, connection, models = main_window, main_window.connection, main_window.item_model
    panel, chat, library = window.model_list_panel, window.chat_page, window.library_page

    def state_cell() -> str:
        return str(models.data(models.index(models.row_of(BUNDLED_ID), STATE_COLUMN)))

    first = connection.service_process
    assert first is not None
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    panel.select_model(BUNDLED_ID)
    qtbot.waitUntil(panel.launch_button.isEnabled)
    qtbot.mouseClick(panel.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    chat.picker.select_model(BUNDLED_ID)
    qtbot.waitUntil(lambda: library.model(BUNDLED_ID) is not None and library.model(BUNDLED_ID)["state"] == "ready")
    assert state_cell() == "Running" and chat.send_button.isEnabled()

    first.kill()  # SIGKILL: the service says nothing, and what its engines do is unknown until it is back
    qtbot.waitUntil(lambda: connection.phase is Phase.LOST)
    assert models.state_of(BUNDLED_ID) is None and state_cell() == "\N{EM DASH}"
    assert "Running" not in panel.state_label.text() and "unknown" in panel.state_label.text()
    assert not panel.launch_button.isEnabled() and not panel.stop_button.isEnabled()
    assert "Running" not in window.home_page.running_label.text()
    assert "running" not in chat.picker.model_combo.currentText() and not chat.picker.load_button.isEnabled()
    assert not chat.send_button.isEnabled()
    chat.prompt_edit.setText("Hello?")
    qtbot.keyClick(chat.prompt_edit, Qt.Key.Key_Return)  # Enter sends nothing either, and keeps the text
    assert chat.prompt_edit.text() == "Hello?" and not chat.is_streaming and chat.messages == ()
    row = next(r for r in range(library.models_table.rowCount()) if row_key(library.models_table, r) == BUNDLED_ID)
    assert library.models_table.item(row, COLUMNS.index("State")).text() == "\N{EM DASH}"
    assert not library.load_button.isEnabled() and not library.eject_button.isEnabled()
    tray_actions = [a for a in window.tray.menu.actions() if a.objectName().endswith(f":{BUNDLED_ID}")]
    assert tray_actions and not any(a.isEnabled() for a in tray_actions)

    qtbot.mouseClick(window.reconnect_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped", timeout=CONNECT_TIMEOUT_MS)
    assert state_cell() == "Not loaded" and "Not loaded" in panel.state_label.text()
    qtbot.waitUntil(panel.launch_button.isEnabled)
    assert chat.picker.load_button.isEnabled()
    qtbot.waitUntil(chat.send_button.isEnabled)  # with the new service's endpoint
    qtbot.waitUntil(lambda: library.models_table.item(row, COLUMNS.index("State")).text() == "Not loaded")
    window.close()
    qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)


def test_the_library_acts_on_no_model_while_the_service_is_lost(
    qtbot: QtBot, main_window: MainWindow, bundled_gguf: Path, tmp_path: Path
) -> None:
    window, connection, library = main_window, main_window.connection, main_window.library_page
    mine = tmp_path / "mine.gguf"
    shutil.copyfile(bundled_gguf, mine)
    library.import_files([mine])
    qtbot.waitUntil(lambda: library.model("mine") is not None, timeout=READY_TIMEOUT_MS)
    library.select("mine")
    buttons = (library.verify_button, library.delete_button, library.load_settings_button, library.load_button)
    qtbot.waitUntil(lambda: all(button.isEnabled() for button in buttons))

    service = connection.service_process
    assert service is not None
    service.kill()  # the model's files are out of reach with the service: nothing to verify, delete or set up
    qtbot.waitUntil(lambda: connection.phase is Phase.LOST)
    assert library.model("mine") is not None and row_key(library.models_table, library.models_table.currentRow())
    assert not any(button.isEnabled() for button in buttons)
    qtbot.mouseClick(library.delete_button, Qt.MouseButton.LeftButton)  # no confirmation for what cannot happen
    assert library.confirm_box is None

    qtbot.mouseClick(window.reconnect_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: all(button.isEnabled() for button in buttons), timeout=CONNECT_TIMEOUT_MS)
    window.close()
    qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)


def test_window_on_a_running_service_leaves_it_running(qtbot: QtBot, paths: AppPaths, service: RunningService) -> None:
    connection = ServiceConnection(paths, default_port())
    window = MainWindow(connection)
    qtbot.addWidget(window)
    window.show()
    connection.open()
    qtbot.waitUntil(lambda: connection.is_connected, timeout=CONNECT_TIMEOUT_MS)
    assert not connection.started_service
    assert connection.service_process is None
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "ready")
    qtbot.waitUntil(lambda: window.endpoint_panel.url_edit.text() == service.url)
    # The engine started before the window opened: its log comes from the service's tail.
    window.model_list_panel.select_model(BUNDLED_ID)
    qtbot.waitUntil(lambda: "Uvicorn running on" in window.log_panel.plain_text())
    # Home asks for the hardware on connecting (seconds on a busy machine: the first detection times a memory
    # copy), and closing waits for calls in flight; this test is about the idle event stream, so let it answer.
    qtbot.waitUntil(lambda: "CPU" in window.home_page.hardware_label.text(), timeout=CONNECT_TIMEOUT_MS)

    started = time.monotonic()
    window.close()
    qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
    # The event stream blocks in a read with nothing to say; closing must end it at once, not at a timeout.
    assert time.monotonic() - started < EVENT_STREAM_STOP_S
    qtbot.waitUntil(lambda: not window.isVisible())
    assert service.process.poll() is None  # not ours: still serving
    assert service.client.health()["status"] == "ok"
