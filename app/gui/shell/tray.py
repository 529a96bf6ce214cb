"""The system tray: the models' states at a glance (in the icon's badge and the tooltip), Start/Stop for each, Open
window and Quit."""

from __future__ import annotations

import functools
from collections import Counter

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QMenu, QSystemTrayIcon, QWidget

from app.api_types import ACTIVE
from app.gui.common.model_item_model import ModelItemModel
from app.gui.shell.app_icon import TrayState, app_icon, tray_state


def tray_tooltip(states: list[str]) -> str:
    """One line a user reads by hovering: how many models are in each state."""
    if not states:
        return "ModelDeck: no models"
    counts = Counter(states)
    return "ModelDeck: " + ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))


class TrayController(QObject):
    """Builds the tray menu from the model list; the icon itself only where the desktop has a tray."""

    sig_start_requested = Signal(str)
    sig_stop_requested = Signal(str)
    sig_open_requested = Signal()
    sig_quit_requested = Signal()

    def __init__(self, item_model: ModelItemModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._item_model = item_model
        self.menu = QMenu()
        self.menu.setAccessibleName("ModelDeck tray menu")
        self.state: TrayState = "idle"
        self.state_icon: QIcon = app_icon(self.state)  # what the tray shows, where the desktop has one
        self.icon: QSystemTrayIcon | None = None
        # Offscreen and some desktops have no tray: the menu still exists, so it can be built and driven in tests.
        if QSystemTrayIcon.isSystemTrayAvailable():
            self.icon = QSystemTrayIcon(self.state_icon, self)
            self.icon.setContextMenu(self.menu)
            self.icon.activated.connect(self._on_icon_activated)
            self.icon.show()
        item_model.dataChanged.connect(self.rebuild)
        item_model.modelReset.connect(self.rebuild)
        item_model.rowsInserted.connect(self.rebuild)
        self.rebuild()

    def tooltip(self) -> str:
        return tray_tooltip(
            [self._item_model.state_of(model_id) or "unknown" for model_id in self._item_model.model_ids()]
        )

    @Slot()
    def rebuild(self) -> None:
        self.menu.clear()
        states = [self._item_model.state_of(model_id) for model_id in self._item_model.model_ids()]
        self._show_state(tray_state(states))
        for model_id, state in zip(self._item_model.model_ids(), states, strict=True):  # None: service out of reach
            running = state in ACTIVE
            shown = state or "unknown"
            label = f"Stop {model_id} ({shown})" if running else f"Start {model_id} ({shown})"
            signal = self.sig_stop_requested if running else self.sig_start_requested
            action = self.menu.addAction(label)
            action.setObjectName(f"{'stop' if running else 'start'}:{model_id}")
            action.setEnabled(state is not None)
            action.triggered.connect(functools.partial(signal.emit, model_id))
        self.menu.addSeparator()
        self.menu.addAction("&Open window").triggered.connect(self.sig_open_requested.emit)
        self.menu.addAction("&Quit").triggered.connect(self.sig_quit_requested.emit)
        if self.icon is not None:
            self.icon.setToolTip(self.tooltip())

    def _show_state(self, state: TrayState) -> None:
        if state == self.state:
            return
        self.state, self.state_icon = state, app_icon(state)
        if self.icon is not None:
            self.icon.setIcon(self.state_icon)

    @Slot(QSystemTrayIcon.ActivationReason)
    def _on_icon_activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.sig_open_requested.emit()


def show_window(window: QWidget) -> None:
    window.showNormal()
    window.raise_()
    window.activateWindow()
