"""Benchmark: from a fresh installation's first window to the first streamed chat answer with the bundled model,
in clicks and seconds.

Run by hand from the repository root (pytest does not collect tests/bench):

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/bench/first_chat.py --rounds 3

Each round gets an empty MODELDECK_HOME (nothing configured, no service running) and a free endpoint port. It
opens the window the way `modeldeck` does (the window starts the service), then acts as a person who knows where
to click, as soon as the window lets them:

  click 1: the Chat tab;
  click 2: Enter in the message box, with a prompt typed (the picker offers the bundled model first).

The bundled model is not running: the endpoint starts it for the first request (a JIT start), and the chat's
status line says so. Measured from just before the window is shown: the service connected, the chat able to send
(model listed, endpoint known), the first streamed token, and the whole answer (`--max-tokens`, 64). The window is
then closed, which stops the service it started, before the next round. Medians and min-max are printed with the
machine's load average, which weighs heavily on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QWidget

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from app.client import default_port  # noqa: E402
from app.gui.common import quit_dialogs  # noqa: E402
from app.gui.connection.service_connection import ServiceConnection  # noqa: E402
from app.gui.shell.main_window import MainWindow  # noqa: E402
from app.hub.library import BUNDLED_ID  # noqa: E402
from app.paths import app_paths  # noqa: E402
from tests.support.service import free_port  # noqa: E402

PROMPT = "Say hello in one short sentence."
STAGES = ("connected", "can_send", "first_token", "answer")


def wait_until(check: Callable[[], bool], timeout_s: float) -> None:
    """Run the event loop until `check()` holds (checked every 10 ms)."""
    deadline = time.monotonic() + timeout_s
    loop = QEventLoop()
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: loop.quit() if check() or time.monotonic() > deadline else None)
    timer.start()
    if not check():
        loop.exec()
    timer.stop()
    if not check():
        raise TimeoutError(f"timed out after {timeout_s} s")


def one_round(app: QApplication, max_tokens: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="modeldeck-first-chat-") as home:
        os.environ["MODELDECK_HOME"] = home
        os.environ["MODELDECK_PORT"] = str(free_port())
        connection = ServiceConnection(app_paths(), default_port())
        window = MainWindow(connection)
        page = window.chat_page
        marks: dict[str, float] = {}
        started = time.perf_counter()
        window.show()
        connection.open()
        wait_until(lambda: connection.is_connected, 120)
        marks["connected"] = time.perf_counter() - started
        window.tabs.setCurrentWidget(page)  # click 1
        wait_until(lambda: page.has_endpoint and page.picker.current_model() == BUNDLED_ID, 60)
        marks["can_send"] = time.perf_counter() - started
        page.params_panel.max_tokens_spin.setValue(max_tokens)  # not a click a person needs: the default is 512
        page.prompt_edit.setText(PROMPT)
        QTest.keyClick(page.prompt_edit, Qt.Key.Key_Return)  # click 2
        wait_until(lambda: page.stats_label.text().startswith("Streaming") or not page.is_streaming, 300)
        marks["first_token"] = time.perf_counter() - started
        wait_until(lambda: not page.is_streaming, 300)
        marks["answer"] = time.perf_counter() - started
        if not page.stats_label.text().startswith("Done"):
            raise RuntimeError(f"no answer: {page.stats_label.text()}")
        print(f"  {page.stats_label.text()}")
        window.close()
        wait_until(lambda: connection.is_closed, 120)
        window.deleteLater()
        page.wait_stopped()
        return marks


def _keep_no_tray(parent: QWidget) -> bool:
    return False


def _stop_engines(parent: QWidget, running_engines: int) -> quit_dialogs.QuitChoice:
    return quit_dialogs.QuitChoice.STOP


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"  # never the user's keyring
    app = QApplication(sys.argv)
    # Closing the window asks two questions in modal boxes; the answers a person gives after the measurement.
    quit_dialogs.ask_close_to_tray = _keep_no_tray
    quit_dialogs.ask_stop_engines = _stop_engines
    rounds = []
    for number in range(1, args.rounds + 1):
        load = os.getloadavg()[0]
        marks = one_round(app, args.max_tokens)
        rounds.append(marks)
        figures = ", ".join(f"{stage} {marks[stage]:.1f} s" for stage in STAGES)
        print(f"round {number} (load average {load:.1f}): {figures}")
    print(f"\nclicks from the first window to the first streamed answer: 2 (the Chat tab, Enter); {len(rounds)} rounds")
    for stage in STAGES:
        values = [r[stage] for r in rounds]
        print(f"{stage:12} median {statistics.median(values):6.1f} s   min {min(values):6.1f}   max {max(values):6.1f}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2-core machine shared with other work)")


if __name__ == "__main__":
    main()
