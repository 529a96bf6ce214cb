"""The Settings tab and the quit behaviour against the real service on the bundled model: a new port and idle TTL
saved and applied by a restart, LAN exposure guided and refused without a key, the API key regenerated, the theme,
and File > Quit / the tray's Quit asking whether the engines keep serving."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QSystemTrayIcon
from pytestqt.qtbot import QtBot

from app.client import find_service
from app.gui.common.quit_dialogs import QuitChoice
from app.gui.connection.service_connection import Phase, ServiceConnection
from app.gui.settings.settings_page import SettingsPage
from app.gui.settings.theme import THEMES, apply_theme, is_dark
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.settings import Settings, load_settings, save_settings
from tests.gui.conftest import API_KEY, CLOSE_TIMEOUT_MS, CONNECT_TIMEOUT_MS, QuitAnswers
from tests.support.held_answer import HeldAnswer
from tests.support.memory_keyring import BACKEND_NAME
from tests.support.service import free_port, start_service_process, stop_service_process

RESTART_TIMEOUT_MS = 60_000
READY_TIMEOUT_MS = 60_000


def _open_window(qtbot: QtBot, connection: ServiceConnection) -> MainWindow:
    window = MainWindow(connection)
    qtbot.addWidget(window)
    window.show()
    connection.open()
    qtbot.waitUntil(lambda: connection.is_connected or connection.phase is Phase.LOST, timeout=CONNECT_TIMEOUT_MS)
    assert connection.is_connected, window.statusBar().currentMessage()
    return window


def _close(qtbot: QtBot, window: MainWindow) -> None:
    if not window.connection.is_closed:
        window.close()
        qtbot.waitUntil(lambda: window.connection.is_closed, timeout=CLOSE_TIMEOUT_MS)


@pytest.fixture
def settings_window(qtbot: QtBot, paths: AppPaths, monkeypatch: pytest.MonkeyPatch) -> Iterator[MainWindow]:
    """The window on a service it started on the port of the saved settings (no $MODELDECK_PORT)."""
    monkeypatch.delenv("MODELDECK_PORT", raising=False)
    monkeypatch.setenv("MODELDECK_API_KEY", API_KEY)
    save_settings(paths, Settings(gateway_port=free_port()))
    window = _open_window(qtbot, ServiceConnection(paths))
    yield window
    _close(qtbot, window)


def test_settings_is_the_last_tab(settings_window: MainWindow) -> None:
    tabs = settings_window.tabs
    assert tabs.widget(tabs.count() - 1) is settings_window.settings_page
    assert tabs.tabText(tabs.count() - 1).replace("&", "") == "Settings"


def test_new_port_and_ttl_apply_after_a_restart(qtbot: QtBot, settings_window: MainWindow, paths: AppPaths) -> None:
    window, page, connection = settings_window, settings_window.settings_page, settings_window.connection
    first = load_settings(paths).settings.gateway_port
    qtbot.waitUntil(lambda: page.gateway_port_spin.value() == first)
    second = free_port()
    while second == first:
        second = free_port()
    page.gateway_port_spin.setValue(second)
    page.ttl_spin.setValue(300)
    with qtbot.waitSignal(connection.sig_settings_saved):
        page.save_button.click()
    assert load_settings(paths).settings == Settings(gateway_port=second, idle_ttl_s=300.0)  # close_to_tray: ask
    assert "endpoint port" in page.restart_label.text() and "idle TTL" in page.restart_label.text()
    assert page.restart_button.isEnabled()

    old_process = connection.service_process
    assert old_process is not None
    with qtbot.waitSignal(connection.sig_service_restarted, timeout=RESTART_TIMEOUT_MS):
        page.restart_button.click()
    assert old_process.poll() is not None, "the old service is still running"
    assert connection.service_process is not old_process and connection.is_connected
    qtbot.waitUntil(lambda: page.restart_label.text() == "" and not page.restart_button.isEnabled())
    qtbot.waitUntil(lambda: window.endpoint_panel.url_edit.text() == f"http://127.0.0.1:{second}/v1")

    with openai.OpenAI(base_url=f"http://127.0.0.1:{second}/v1", api_key=API_KEY, max_retries=0) as client:
        assert BUNDLED_ID in [model.id for model in client.models.list()]
    with (
        openai.OpenAI(base_url=f"http://127.0.0.1:{first}/v1", api_key=API_KEY, max_retries=0, timeout=5) as old,
        pytest.raises(openai.APIConnectionError),
    ):
        old.models.list()
    assert connection.client is not None
    assert next(m for m in connection.client.models() if m["id"] == BUNDLED_ID)["idle_ttl_s"] == 300.0


def test_lan_exposure_is_a_guided_step(
    qtbot: QtBot, settings_window: MainWindow, paths: AppPaths, tmp_path: Path
) -> None:
    page, connection = settings_window.settings_page, settings_window.connection
    qtbot.waitUntil(lambda: bool(page.lan_label.text()))
    assert "this computer only" in page.lan_label.text()
    dialog = page.open_lan_dialog()
    assert "Anyone on your network" in dialog.warning_label.text()
    assert "API key" in dialog.key_label.text()
    assert not dialog.expose_button.isEnabled(), "exposure needs the explicit confirmation first"
    dialog.confirm_check.setChecked(True)
    with qtbot.waitSignal(connection.sig_settings_saved):
        dialog.expose_button.click()
    assert load_settings(paths).settings.bind_address == "0.0.0.0"
    assert "0.0.0.0" in page.lan_label.text() and "network exposure" in page.restart_label.text()
    # Screenshots for a reviewer, under the test's temporary directory.
    page.grab().save(str(tmp_path / "settings-page.png"))
    page.open_lan_dialog().grab().save(str(tmp_path / "lan-exposure-dialog.png"))
    assert page.lan_dialog is not None
    page.lan_dialog.reject()
    with qtbot.waitSignal(connection.sig_settings_saved):
        page.local_only_button.click()
    assert load_settings(paths).settings.bind_address == "127.0.0.1"


def test_lan_exposure_is_refused_without_a_key(qtbot: QtBot, paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--no-api-key")
    try:
        window = _open_window(qtbot, ServiceConnection(paths))
        page, connection = window.settings_page, window.connection
        qtbot.waitUntil(lambda: bool(page.lan_label.text()) and page.key_edit.placeholderText().startswith("none"))
        assert not page.regenerate_button.isEnabled() and not page.reveal_button.isEnabled()
        dialog = page.open_lan_dialog()
        assert "without an API key" in dialog.key_label.text()
        assert not dialog.confirm_check.isEnabled() and not dialog.expose_button.isEnabled()
        dialog.reject()
        # Asked directly, the service refuses as well.
        with qtbot.waitSignal(connection.sig_settings_refused) as refused:
            connection.save_settings({"bind_address": "0.0.0.0"}, confirm_lan_exposure=True)
        assert "without an API key" in refused.args[0]
        assert page.message_label.text().startswith("Not saved:")
        assert load_settings(paths).settings.bind_address == "127.0.0.1"
        _close(qtbot, window)
        assert service.process.poll() is None  # found running, left running
    finally:
        stop_service_process(service)


def test_a_models_folder_whose_name_is_too_long_is_refused(
    qtbot: QtBot, settings_window: MainWindow, paths: AppPaths, tmp_path: Path
) -> None:
    page, connection = settings_window.settings_page, settings_window.connection
    chosen = tmp_path / "models"
    page.models_dir_edit.setText(str(chosen))
    with qtbot.waitSignal(connection.sig_settings_saved):
        page.save_button.click()
    name = "m" * 3000  # no file system takes a name that long: such a folder can never be made
    for folder in (tmp_path / name, tmp_path / "not-yet" / name / "models"):
        page.models_dir_edit.setText(str(folder))
        with qtbot.waitSignal(connection.sig_settings_refused):
            page.save_button.click()
        message = page.message_label.text()
        assert message.startswith("Not saved: models_dir: the folder name 'mmm") and "3000 bytes long" in message
        assert len(message) < 200, "one line: not the whole path"
        assert load_settings(paths).settings.models_dir == str(chosen)  # the old setting stays
        assert page.models_dir_edit.text() == str(folder)  # kept to correct


def test_regenerate_the_key_from_the_page(
    qtbot: QtBot, paths: AppPaths, tmp_path: Path, quit_answers: QuitAnswers
) -> None:
    service = start_service_process(paths, tmp_path, api_key="")  # the key lives in its user-only file
    try:
        window = _open_window(qtbot, ServiceConnection(paths))
        page = window.settings_page
        old = service.client.endpoint()["api_key"]
        qtbot.waitUntil(lambda: page.key_edit.text() == old)
        assert page.key_edit.echoMode() == page.key_edit.EchoMode.Password
        page.reveal_button.click()
        assert page.key_edit.echoMode() == page.key_edit.EchoMode.Normal
        page.copy_button.click()
        assert QApplication.clipboard().text() == old
        page.regenerate_button.click()
        assert "Regenerate the API key" in quit_answers.asked
        qtbot.waitUntil(lambda: page.key_edit.text() not in ("", old))
        assert page.message_label.text() == "A new API key is in use."
        assert window.endpoint_panel.key_edit.text() == page.key_edit.text()
        with pytest.raises(openai.AuthenticationError):
            service.openai_client(old).models.list()
        assert service.openai_client(page.key_edit.text()).models.list()
        _close(qtbot, window)
    finally:
        stop_service_process(service)


def test_a_refused_regeneration_says_the_key_is_unchanged(qtbot: QtBot, settings_window: MainWindow) -> None:
    page = settings_window.settings_page  # the service's key comes from $MODELDECK_API_KEY: it cannot replace it
    qtbot.waitUntil(lambda: page.key_edit.text() == API_KEY)
    page.regenerate_button.click()
    qtbot.waitUntil(lambda: "Regenerating" not in page.message_label.text())
    assert page.message_label.text().startswith("Not replaced:")
    assert "MODELDECK_API_KEY" in page.message_label.text()
    assert page.key_edit.text() == settings_window.endpoint_panel.key_edit.text() == API_KEY


def test_theme_switch_applies_a_dark_palette(qtbot: QtBot, paths: AppPaths) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    page = SettingsPage(ServiceConnection(paths))  # never opened: the theme is the window's own business
    qtbot.addWidget(page)
    try:
        page.theme_combo.setCurrentIndex(THEMES.index("dark"))
        assert is_dark(app.palette())
        qtbot.waitUntil(lambda: is_dark(page.palette()))  # widgets hear of it through a posted event
        assert app.palette().color(QPalette.ColorRole.Text).lightness() > 180
        page.theme_combo.setCurrentIndex(THEMES.index("light"))
        assert not is_dark(app.palette())
        assert page.changes()["theme"] == "light"
        page.theme_combo.setCurrentIndex(THEMES.index("dark"))
        page.theme_combo.setCurrentIndex(THEMES.index("system"))
        assert not is_dark(app.palette())  # back to the platform's palette (light offscreen)
    finally:
        apply_theme(app, "system")


def test_tray_stop_and_quit_leaving_the_service_running(
    qtbot: QtBot, main_window: MainWindow, paths: AppPaths, quit_answers: QuitAnswers
) -> None:
    window, models, connection = main_window, main_window.item_model, main_window.connection
    connection.start_model(BUNDLED_ID)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    stop = next(a for a in window.tray.menu.actions() if a.objectName() == f"stop:{BUNDLED_ID}")
    stop.trigger()
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped", timeout=READY_TIMEOUT_MS)

    quit_answers.stop_engines = QuitChoice.CANCEL
    next(a for a in window.tray.menu.actions() if a.text() == "&Quit").trigger()
    assert quit_answers.asked == ["stop_engines"] and window.isVisible() and connection.is_connected

    process = connection.service_process
    assert process is not None
    quit_answers.stop_engines = QuitChoice.LEAVE_RUNNING
    window.quit_action.trigger()  # File > Quit, Ctrl+Q
    qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
    assert quit_answers.asked == ["stop_engines", "stop_engines"]
    try:
        assert process.poll() is None and find_service(paths) is not None, "the service should keep serving"
    finally:
        process.terminate()
        process.wait(30)


def test_closing_the_window_can_leave_it_in_the_tray(
    qtbot: QtBot, main_window: MainWindow, paths: AppPaths, quit_answers: QuitAnswers
) -> None:
    """Offscreen has no system tray, so the window is given a tray icon that is never shown."""
    window = main_window
    window.tray.icon = QSystemTrayIcon(window.tray)
    quit_answers.close_to_tray = True
    window.close()
    assert quit_answers.asked == ["close_to_tray"], "asked once, the first time"
    assert not window.isVisible() and window.connection.is_connected
    qtbot.waitUntil(lambda: load_settings(paths).settings.close_to_tray is True)
    window.show()
    window.close()
    assert quit_answers.asked == ["close_to_tray"] and not window.isVisible()
    window.quit()  # quitting never goes to the tray
    qtbot.waitUntil(lambda: window.connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
    assert quit_answers.asked == ["close_to_tray", "stop_engines"]


def test_a_settings_answer_from_before_a_save_does_not_undo_it(
    qtbot: QtBot, main_window: MainWindow, quit_answers: QuitAnswers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of the settings that the service answered before the user's choice was saved, and whose answer
    reaches the window after the save's: the order a loaded machine produced for the window's first read."""
    window, connection = main_window, main_window.connection
    held = HeldAnswer(monkeypatch, connection, "settings")
    window.tray.icon = QSystemTrayIcon(window.tray)  # offscreen has no tray: one that is never shown
    quit_answers.close_to_tray = True
    window.settings_page.refresh()
    qtbot.waitUntil(held.answered.is_set)
    with qtbot.waitSignal(connection.sig_settings_saved):
        window.close()
    held.deliver(qtbot)
    window.show()
    window.close()
    assert quit_answers.asked == ["close_to_tray"] and not window.isVisible(), "the saved answer was forgotten"
    window.quit()
    qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)


def test_hf_token_is_set_and_cleared_never_shown(
    qtbot: QtBot, paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's keyring is the in-memory test backend (no OS keyring exists on the test machines)."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", BACKEND_NAME)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    service = start_service_process(paths, tmp_path)
    secret = "hf_PanelSecret0123456789"
    try:
        window = _open_window(qtbot, ServiceConnection(paths))
        panel = window.settings_page.secrets_panel
        qtbot.waitUntil(lambda: panel.state_label.text() == "No token is saved.")
        assert not panel.clear_button.isEnabled()
        panel.token_edit.setText(secret)
        with qtbot.waitSignal(window.connection.sig_hf_token_changed) as changed:
            panel.save_button.click()
        assert changed.args == [True] and panel.token_edit.text() == ""
        assert panel.state_label.text() == "A token is saved in the OS keyring." and panel.clear_button.isEnabled()
        with qtbot.waitSignal(window.connection.sig_settings_received) as received:
            window.settings_page.refresh()
        assert received.args[0]["hf_token"]["set"] is True and secret not in str(received.args[0])
        with qtbot.waitSignal(window.connection.sig_hf_token_changed) as changed:
            panel.clear_button.click()
        assert changed.args == [False] and panel.state_label.text() == "No token is saved."
        _close(qtbot, window)
    finally:
        stop_service_process(service)
    assert secret not in service.output()


def test_a_taken_port_is_reported_and_the_service_keeps_running(
    qtbot: QtBot, settings_window: MainWindow, paths: AppPaths
) -> None:
    page, connection = settings_window.settings_page, settings_window.connection
    qtbot.waitUntil(lambda: page.gateway_port_spin.value() == load_settings(paths).settings.gateway_port)
    process = connection.service_process
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        page.gateway_port_spin.setValue(taken.getsockname()[1])
        with qtbot.waitSignal(connection.sig_settings_saved):
            page.save_button.click()
        with qtbot.waitSignal(connection.sig_error_occurred) as error:
            page.restart_button.click()
    assert "is not free" in error.args[0] and "choose another" in error.args[0]
    assert connection.is_connected and connection.service_process is process and process is not None
    assert process.poll() is None
    assert "is not free" in page.message_label.text() and page.restart_button.isEnabled()


def test_ctrl_c_quits_without_a_question(qtbot: QtBot, main_window: MainWindow, quit_answers: QuitAnswers) -> None:
    process = main_window.connection.service_process
    assert process is not None
    main_window.quit_without_asking()
    qtbot.waitUntil(lambda: main_window.connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
    assert quit_answers.asked == [] and process.poll() is not None  # ours: stopped
