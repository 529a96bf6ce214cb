"""Notifications for what happens while the user looks elsewhere: a download finished, an engine crashed, an
engine came back after a crash. A tray balloon where the desktop has a tray, else a banner in the window."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QSystemTrayIcon, QWidget

from app.api_types import DownloadRecord, EngineEvent, ModelState

BANNER_TIMEOUT_MS = 15_000
BALLOON_TIMEOUT_MS = 8_000


class Severity(enum.Enum):
    INFO = "info"
    WARNING = "warning"


@dataclass(frozen=True)
class Notification:
    """One thing to tell the user: a title, a sentence, how serious it is."""

    title: str
    message: str
    severity: Severity = Severity.INFO


def _headline(message: object) -> str:
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    return lines[0] if lines else "no reason given"


def engine_notification(event: EngineEvent) -> Notification | None:
    """What an engine event is worth telling: a crash of a running engine, its restart, a failure. Ordinary
    starts and stops the user asked for are not news."""
    model_id, state, previous = event["model_id"], event["state"], event["previous"]
    if state == ModelState.RESTARTING and previous == ModelState.READY:
        return Notification(
            f"{model_id} crashed",
            f"Its engine {_headline(event.get('message'))}; ModelDeck is restarting it.",
            Severity.WARNING,
        )
    if state == ModelState.READY and previous == ModelState.RESTARTING:
        return Notification(f"{model_id} restarted", "Its engine is running again after a crash.")
    if state == ModelState.FAILED:
        return Notification(f"{model_id} failed", _headline(event.get("message")), Severity.WARNING)
    return None


def download_notification(record: DownloadRecord) -> Notification:
    """A finished download, as the downloads panel reports it."""
    return Notification(
        "Download finished", f"{record['repo']} ({record['variant']}) is in the library as {record['model_id']}."
    )


class NotificationBanner(QFrame):
    """The in-window fallback: one line across the top of the window, closed by the user or after a while."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("notification_banner")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAccessibleName("Notification")
        self.text_label = QLabel()
        self.text_label.setWordWrap(True)
        self.text_label.setAccessibleName("Notification text")
        self.close_button = QPushButton("Dismiss")
        self.close_button.setAccessibleName("Dismiss the notification")
        layout = QHBoxLayout(self)
        layout.addWidget(self.text_label, 1)
        layout.addWidget(self.close_button)
        self._hide_timer = QTimer(self)
        self._hide_timer.setSingleShot(True)
        self._hide_timer.setInterval(BANNER_TIMEOUT_MS)
        self._hide_timer.timeout.connect(self.hide)
        self.close_button.clicked.connect(self.hide)
        self.hide()

    def show_notification(self, notification: Notification) -> None:
        colour = "#fdecea" if notification.severity is Severity.WARNING else "#e8f4fd"
        self.setStyleSheet(f"#notification_banner {{ background: {colour}; }}")
        self.text_label.setText(f"<b>{notification.title}</b>: {notification.message}")
        self.show()
        self._hide_timer.start()


class Notifier(QObject):
    """Shows each notification once: as a tray balloon when there is a tray icon that shows messages, else in
    the banner. Keeps what it showed, newest last, for the window and its tests."""

    sig_notified = Signal(object)  # the Notification just shown

    def __init__(self, banner: NotificationBanner, tray_icon: QSystemTrayIcon | None, parent: QObject | None = None):
        super().__init__(parent)
        self._banner = banner
        self._tray_icon = tray_icon
        self.shown: list[Notification] = []

    @property
    def uses_tray(self) -> bool:
        return self._tray_icon is not None and QSystemTrayIcon.supportsMessages()

    def notify(self, notification: Notification) -> None:
        if self._tray_icon is not None and self.uses_tray:
            icon = (
                QSystemTrayIcon.MessageIcon.Warning
                if notification.severity is Severity.WARNING
                else QSystemTrayIcon.MessageIcon.Information
            )
            self._tray_icon.showMessage(notification.title, notification.message, icon, BALLOON_TIMEOUT_MS)
        else:
            self._banner.show_notification(notification)
        self.shown.append(notification)
        self.sig_notified.emit(notification)

    @Slot(object)
    def on_engine_changed(self, event: EngineEvent) -> None:
        notification = engine_notification(event)
        if notification is not None:
            self.notify(notification)

    @Slot(object)
    def on_download_finished(self, record: DownloadRecord) -> None:
        self.notify(download_notification(record))
