"""What closing the main window does: hide it to the tray, or quit, asking first, and wait for the service to stop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Slot
from PySide6.QtGui import QCloseEvent

from app.api_types import ACTIVE
from app.gui.common import quit_dialogs
from app.gui.shell.tray import show_window
from app.settings import load_settings

if TYPE_CHECKING:  # the window owns its close flow: only the type is needed here
    from app.gui.shell.main_window import MainWindow

_ASK = "ask"  # no answer given beforehand: ask whether to stop the engines


class CloseFlow(QObject):
    """Decides what a close event on the window means, so the window only builds and wires its pages.

    Quitting takes seconds (the service stops its engines): the window is disabled meanwhile and closes for real
    once the connection says it is closed.
    """

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self._window = window
        self._close_requested = False  # the connection is closing; the window closes when it is done
        self._quitting = False  # File > Quit or the tray's Quit: close for real, never to the tray
        self._stop_service_on_close: bool | None = None
        self._preset_stop_service: bool | str | None = _ASK  # set by quit_without_asking
        # Read once here (a small local file); the Settings page keeps it current afterwards.
        self._close_to_tray: bool | None = load_settings(window.connection.paths).settings.close_to_tray

    @Slot()
    def quit(self) -> None:
        """File > Quit and the tray's Quit: close for real, asking whether the engines keep serving."""
        self._quitting = True
        self._window.close()

    def quit_without_asking(self, stop_service: bool | None = None) -> None:
        """Quit with no question (Ctrl+C in the terminal): `stop_service` as ServiceConnection.close takes it."""
        self._quitting = True
        self._preset_stop_service = stop_service
        self._window.close()

    @Slot(object)
    def on_settings_applied(self, settings: dict[str, Any]) -> None:
        """The Settings page changed the close-to-tray choice: the next close follows it."""
        self._close_to_tray = settings.get("close_to_tray")

    @Slot()
    def on_connection_closed(self) -> None:
        """The service stopped (or was left running) as asked: the window may close now."""
        if self._close_requested:
            QTimer.singleShot(0, self._window.close)  # not from inside closeEvent, which may still be on the stack

    def handle(self, event: QCloseEvent) -> None:
        """The window's closeEvent: accept it only once the connection is closed; until then ask, hide or wait."""
        window = self._window
        connection = window.connection
        if connection.is_closed:
            event.accept()
            window.sig_window_closed.emit()
            return
        if self._close_requested:  # already closing: wait for the connection
            event.ignore()
            return
        if self._closes_to_tray():
            event.ignore()
            window.hide()
            return
        preset, self._preset_stop_service = self._preset_stop_service, _ASK
        if not self._chat_may_be_lost(ask=preset == _ASK):
            self._quitting = False
            event.ignore()
            return
        if preset == _ASK:
            choice = quit_dialogs.ask_stop_engines(window, self._running_engines())
            self._quitting = False
            if choice is quit_dialogs.QuitChoice.CANCEL:
                event.ignore()
                return
            stop_service: bool | None = choice is quit_dialogs.QuitChoice.STOP
        else:
            stop_service = preset if isinstance(preset, bool) else None
        # Stopping the service (and its engines) takes seconds: the window stays up, disabled, until the
        # connection reports it is done, then closes itself.
        event.ignore()
        self._close_requested = True
        self._stop_service_on_close = stop_service
        window.chat_page.wait_stopped()
        window.snippets_panel.wait_stopped()
        if window.setup_dialog is not None:
            window.setup_dialog.reject()
        central = window.centralWidget()
        if central is not None:
            central.setEnabled(False)
        connection.close(stop_service=self._stop_service_on_close)

    def _closes_to_tray(self) -> bool:
        """Closing the window (not quitting) hides it to the tray when the user chose so; asked the first time."""
        window = self._window
        if self._quitting or window.tray.icon is None:
            return False
        if self._close_to_tray is None:
            self._close_to_tray = quit_dialogs.ask_close_to_tray(window)
            if window.connection.is_connected:
                window.connection.save_settings({"close_to_tray": self._close_to_tray})
        return self._close_to_tray

    def _running_engines(self) -> int:
        item_model = self._window.item_model
        states = (item_model.state_of(model_id) for model_id in item_model.model_ids())
        return sum(1 for state in states if state in ACTIVE)

    def _chat_may_be_lost(self, ask: bool) -> bool:
        """Whether quitting goes on: the open chat is saved at last, or the user lets it go (when asking is allowed;
        Ctrl+C in the terminal quits whatever happens)."""
        window = self._window
        problem = window.chat_page.save_before_closing()
        if problem is None or not ask:
            return True
        show_window(window)  # from the tray's Quit the window may be hidden: the chat in question is on it
        window.tabs.setCurrentWidget(window.chat_page)
        return quit_dialogs.ask_quit_unsaved(window, problem)
