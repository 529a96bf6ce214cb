"""The endpoint's TLS certificate in the window, against the real service serving HTTPS (--tls on, loopback only
traffic) and the bundled model: Settings shows and copies the fingerprint, the snippets trust the certificate file,
and "Test it" streams an answer over TLS."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.gui.connection.service_connection import Phase, ServiceConnection
from app.gui.settings.settings_page import SettingsPage
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.gui.conftest import API_KEY, CLOSE_TIMEOUT_MS, CONNECT_TIMEOUT_MS
from tests.support.service import start_service_process, stop_service_process

READY_TIMEOUT_MS = 60_000
ANSWER_TIMEOUT_MS = 60_000


def test_settings_and_snippets_show_the_certificate_and_test_it_streams_over_tls(
    qtbot: QtBot, paths: AppPaths, tmp_path: Path
) -> None:
    service = start_service_process(paths, tmp_path, "--tls", "on", api_key=API_KEY)
    try:
        tls = service.client.endpoint()["tls"]
        fingerprint, cert_path = tls["fingerprint_sha256"], tls["cert_path"]
        connection = ServiceConnection(paths)
        window = MainWindow(connection)
        qtbot.addWidget(window)
        window.show()
        connection.open()
        qtbot.waitUntil(lambda: connection.is_connected or connection.phase is Phase.LOST, timeout=CONNECT_TIMEOUT_MS)
        assert connection.is_connected, window.statusBar().currentMessage()

        page = window.settings_page
        qtbot.waitUntil(lambda: fingerprint in page.tls_label.text())
        assert "HTTPS" in page.tls_label.text() and cert_path in page.tls_label.text()
        page.copy_fingerprint_button.click()
        assert QGuiApplication.clipboard().text() == fingerprint

        snippets = window.snippets_panel
        window.model_list_panel.select_model(BUNDLED_ID)
        qtbot.waitUntil(snippets.test_button.isEnabled)
        code = {language: edit.toPlainText() for language, edit in snippets.code_edits.items()}
        assert all(fingerprint in text and "https://" in text for text in code.values()), code
        assert f"--cacert {cert_path}" in code["curl"]
        assert f'cafile="{cert_path}"' in code["Python"] and "verify=tls" in code["Python"]
        assert f"NODE_EXTRA_CA_CERTS={cert_path}" in code["JavaScript"]

        qtbot.mouseClick(window.model_list_panel.launch_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
        qtbot.mouseClick(snippets.test_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not snippets.is_testing, timeout=ANSWER_TIMEOUT_MS)
        assert "TTFT" in snippets.stats_label.text(), snippets.answer_label.text()
        assert snippets.answer_label.text().strip()
        page.grab().save(str(tmp_path / "settings-tls.png"))
        window.close()
        qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
    finally:
        stop_service_process(service)


def test_a_plain_endpoint_says_so(qtbot: QtBot, paths: AppPaths) -> None:
    page = SettingsPage(ServiceConnection(paths))  # never opened: the endpoint info is handed to it
    qtbot.addWidget(page)
    page._on_connection_endpoint_received({"url": "http://127.0.0.1:8642/v1", "api_key": "k", "tls": None})
    assert "plain HTTP" in page.tls_label.text() and not page.copy_fingerprint_button.isEnabled()
