"""Help > About ModelDeck against the real service: versions, the build commit and the engines it can run."""

from __future__ import annotations

import subprocess

from PySide6.QtWidgets import QTableWidget
from pytestqt.qtbot import QtBot

from app import __version__
from app.client import default_port
from app.gui.connection.service_connection import ServiceConnection
from app.gui.shell.main_window import MainWindow
from app.paths import AppPaths
from tests.gui.conftest import CLOSE_TIMEOUT_MS, CONNECT_TIMEOUT_MS
from tests.support.service import REPO, RunningService

ANSWER_TIMEOUT_MS = 120_000  # the service asks each engine for its version (a Python import or two)


def table_rows(table: QTableWidget) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for row in range(table.rowCount()):
        cells = [table.item(row, column) for column in range(table.columnCount())]
        texts = [cell.text() if cell is not None else "" for cell in cells]
        rows[texts[0]] = texts[1:]
    return rows


def test_about_shows_versions_commit_and_engines(qtbot: QtBot, paths: AppPaths, service: RunningService) -> None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    commit = head.stdout.strip()[:12]
    connection = ServiceConnection(paths, default_port())
    window = MainWindow(connection)
    qtbot.addWidget(window)
    window.show()
    connection.open()
    qtbot.waitUntil(lambda: connection.is_connected, timeout=CONNECT_TIMEOUT_MS)

    window.about_action.trigger()
    dialog = window.about_dialog
    assert dialog is not None and dialog.isVisible()
    assert f"ModelDeck {__version__}" in dialog.window_label.text() and commit in dialog.window_label.text()
    qtbot.waitUntil(lambda: dialog.engine_table.rowCount() > 0, timeout=ANSWER_TIMEOUT_MS)
    assert dialog.service_label.text() == f"Service: ModelDeck {__version__}, built from commit {commit}"
    engines = table_rows(dialog.engine_table)
    installed, detail = engines["llama-cpp-python"]
    assert installed not in ("no", "") and installed in detail  # its version, from the package's metadata
    assert "llama-server" in engines and "vllm" in engines

    window.close()
    qtbot.waitUntil(lambda: connection.is_closed, timeout=CLOSE_TIMEOUT_MS)
