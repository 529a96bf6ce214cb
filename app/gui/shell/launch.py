"""`modeldeck` with no subcommand: open the window, or say how to run headless when there is no display."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from types import FrameType

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.gui.connection.service_connection import ServiceConnection
from app.gui.settings.theme import apply_theme
from app.gui.shell.app_icon import app_icon
from app.gui.shell.main_window import MainWindow
from app.gui.shell.system_libraries import (
    MISSING_LIBRARIES_EXIT_CODE,
    check_plugin,
    missing_message,
    show_desktop_error,
    uses_xcb,
    xcb_plugin,
)
from app.paths import AppPaths
from app.settings import LoadedSettings

NO_DISPLAY_EXIT_CODE = 2
HEADLESS_HINT = (
    "modeldeck: no display is available (neither DISPLAY nor WAYLAND_DISPLAY is set), so the window cannot "
    "open.\n"
    "To serve models without a window, run the service headless:\n"
    "    modeldeck serve            (or: installers/run.sh serve)\n"
    "and use the OpenAI endpoint it prints; `modeldeck models` and `modeldeck ps` work without a display too."
)
# Python runs signal handlers only between bytecodes; while Qt's event loop waits in C++, a timer gives it
# the chance to, so that Ctrl+C closes the window (and the service it started) instead of being ignored.
SIGNAL_CHECK_MS = 250


def has_display(environ: Mapping[str, str] | None = None, platform: str | None = None) -> bool:
    """False on Linux without an X11 or Wayland display and with no Qt platform chosen by hand."""
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        return True
    return any(environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


def run_gui(paths: AppPaths, loaded: LoadedSettings) -> int:
    """Open the window, connected to the service (started if none runs); the exit code of the event loop.
    `loaded`: the settings as the command read them, with the problem of a file it set aside (then gone from disk:
    neither a second read nor the service would see it to say so)."""
    if not has_display():
        print(HEADLESS_HINT, file=sys.stderr)
        return NO_DISPLAY_EXIT_CODE
    missing = check_plugin(xcb_plugin()) if uses_xcb(os.environ) else []
    if missing:  # Qt would abort with a plugin dump; say which packages to install instead
        message = missing_message(missing)
        print(f"modeldeck: {message}", file=sys.stderr)
        show_desktop_error(message)
        return MISSING_LIBRARIES_EXIT_CODE
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setApplicationName("ModelDeck")
    app.setDesktopFileName("modeldeck")  # the taskbar pairs the window with modeldeck.desktop and its icon
    app.setWindowIcon(app_icon())
    if loaded.settings.theme != "system":  # "system" is what Qt does by itself
        apply_theme(app, loaded.settings.theme)
    app.setQuitOnLastWindowClosed(False)  # the window may close to the tray; quitting is explicit
    connection = ServiceConnection(paths)  # the port: $MODELDECK_PORT, else the settings (`serve` decides)
    window = MainWindow(connection)
    window.sig_window_closed.connect(app.quit)
    if loaded.problem:
        window.statusBar().showMessage(f"Settings: {loaded.problem}")

    def close_window(_signum: int, _frame: FrameType | None) -> None:
        window.quit_without_asking()  # Ctrl+C: no dialog; the service stops if this window started it

    previous_handler = signal.signal(signal.SIGINT, close_window)
    signal_timer = QTimer()
    signal_timer.timeout.connect(lambda: None)
    signal_timer.start(SIGNAL_CHECK_MS)
    try:
        window.show()
        connection.open()
        return app.exec()
    finally:
        signal_timer.stop()
        signal.signal(signal.SIGINT, previous_handler)
