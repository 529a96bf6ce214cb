"""Benchmark: from a fresh install's first window to the first streamed chat answer with the bundled model,
in clicks and seconds.

Run by hand from the repository root (pytest does not collect tests/bench; naming the file runs it):

    QT_QPA_PLATFORM=offscreen .venv/bin/python -m pytest tests/bench/first_answer.py -s -q

A fresh MODELDECK_HOME (no settings, no window state, no engine ever launched); the window starts its own
service. The path a new user takes, every step a real click on the real widget: Home's first-run offer starts
the bundled model (click 1); once it is ready, Home's next step opens Chat (click 2); a question is typed and
Send pressed (click 3). Printed: the clicks, and the seconds of each phase (window shown -> service connected
-> offer clickable -> model ready -> first streamed token in the transcript), and the machine's load.
"""

from __future__ import annotations

import os
import time

import psutil
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.client import default_port
from app.gui.connection.service_connection import Phase, ServiceConnection
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.gui.conftest import endpoint_port, quit_answers  # noqa: F401 (fixtures)

TIMEOUT_MS = 180_000
QUESTION = "What is the capital of France?"


def test_first_window_to_first_streamed_answer(qtbot: QtBot, paths: AppPaths, endpoint_port: int) -> None:  # noqa: F811
    load_before = os.getloadavg()
    clicks = 0

    def click(widget: object) -> None:
        nonlocal clicks
        clicks += 1
        qtbot.mouseClick(widget, Qt.MouseButton.LeftButton)

    started = time.perf_counter()
    marks: dict[str, float] = {}
    connection = ServiceConnection(paths, default_port())
    window = MainWindow(connection)
    qtbot.addWidget(window)
    window.resize(1100, 720)
    window.show()
    qtbot.waitExposed(window)
    marks["window shown"] = time.perf_counter()
    connection.open()
    qtbot.waitUntil(lambda: connection.is_connected or connection.phase is Phase.LOST, timeout=TIMEOUT_MS)
    assert connection.is_connected, window.statusBar().currentMessage()
    marks["service connected"] = time.perf_counter()

    home = window.home_page
    offer = home.first_run_panel
    qtbot.waitUntil(lambda: home.first_run_shown and offer.start_button.isEnabled(), timeout=TIMEOUT_MS)
    marks["offer clickable"] = time.perf_counter()
    click(offer.start_button)
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "ready", timeout=TIMEOUT_MS)
    qtbot.waitUntil(home.next_step_panel.isVisible, timeout=TIMEOUT_MS)
    marks["model ready"] = time.perf_counter()

    click(home.next_step_panel.chat_button)
    chat = window.chat_page
    assert window.tabs.currentWidget() is chat
    qtbot.waitUntil(lambda: chat.model_combo.currentText() == BUNDLED_ID, timeout=TIMEOUT_MS)
    QTest.keyClicks(chat.prompt_edit, QUESTION)
    before = chat.transcript.toPlainText()
    click(chat.send_button)
    sent = time.perf_counter()
    prefix = f"{BUNDLED_ID}: "

    def answered() -> bool:
        text = chat.transcript.toPlainText()
        return len(text) > len(before) and not text.rstrip().endswith(prefix.rstrip())

    qtbot.waitUntil(answered, timeout=TIMEOUT_MS)
    marks["first streamed token"] = time.perf_counter()
    qtbot.waitUntil(lambda: not chat.is_streaming, timeout=TIMEOUT_MS)

    load_after = os.getloadavg()
    print(f"\nclicks: {clicks} (Start on Home's offer, Open Chat, Send); typed: {len(QUESTION)} characters")
    previous = started
    for what, at in marks.items():
        print(f"  {what:22} {at - started:6.1f} s   (+{at - previous:5.1f} s)")
        previous = at
    print(f"  Send -> first token   {marks['first streamed token'] - sent:6.2f} s")
    print(f"total, first window to first streamed answer: {marks['first streamed token'] - started:.1f} s")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({psutil.cpu_count()} CPUs)")
    window.close()
    qtbot.waitUntil(lambda: connection.is_closed, timeout=TIMEOUT_MS)
