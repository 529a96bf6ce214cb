"""The questions asked when the window closes or ModelDeck quits. Module-level functions, so that tests answer
them (tests/gui/conftest.py replaces them) instead of waiting on a modal dialog."""

from __future__ import annotations

import enum

from PySide6.QtWidgets import QMessageBox, QWidget


class QuitChoice(enum.Enum):
    STOP = "stop"  # stop the engines and the service, then quit
    LEAVE_RUNNING = "leave"  # quit the window; the service keeps serving
    CANCEL = "cancel"


def ask_close_to_tray(parent: QWidget) -> bool:
    """Asked once, the first time the window is closed: keep ModelDeck running in the tray?"""
    answer = QMessageBox.question(
        parent,
        "Keep ModelDeck running?",
        "When the window closes, ModelDeck can keep serving your models from the system tray.\n\n"
        "Keep it running in the tray? (You can change this in Settings.)",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.Yes,
    )
    return answer == QMessageBox.StandardButton.Yes


def ask_stop_engines(parent: QWidget, running_engines: int) -> QuitChoice:
    """Asked on File > Quit and the tray's Quit: stop the engines and the service, or leave them serving?"""
    box = QMessageBox(parent)
    box.setWindowTitle("Quit ModelDeck")
    box.setIcon(QMessageBox.Icon.Question)
    plural = "s" if running_engines != 1 else ""
    engines = f"{running_engines} engine{plural} running" if running_engines else "no engine running"
    box.setText(f"Stop the ModelDeck service too? It has {engines}.")
    box.setInformativeText("Left running, the endpoint keeps answering other programs after the window is gone.")
    stop = box.addButton("Stop engines and quit", QMessageBox.ButtonRole.AcceptRole)
    leave = box.addButton("Quit, keep serving", QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(stop)
    box.exec()
    clicked = box.clickedButton()
    if clicked is stop:
        return QuitChoice.STOP
    if clicked is leave:
        return QuitChoice.LEAVE_RUNNING
    return QuitChoice.CANCEL


def ask_quit_unsaved(parent: QWidget, why: str) -> bool:
    """Asked when ModelDeck quits with the open chat still not saved (`why`, in words for the user): quit and lose
    it? Keeping the window open is the default, so that a hurried Enter loses nothing."""
    box = QMessageBox(parent)
    box.setWindowTitle("Quit without saving the chat?")
    box.setIcon(QMessageBox.Icon.Warning)
    box.setText("The open chat is not saved, and is lost if ModelDeck quits now.")
    box.setInformativeText(f"{why}. Keep the window open to save it once the file is free.")
    keep = box.addButton("Keep the window open", QMessageBox.ButtonRole.RejectRole)
    lose = box.addButton("Quit without saving", QMessageBox.ButtonRole.DestructiveRole)
    box.setDefaultButton(keep)
    box.setEscapeButton(keep)
    box.exec()
    return box.clickedButton() is lose


def ask_confirmation(parent: QWidget, title: str, text: str) -> bool:
    """A yes/no question before an action that cannot be undone (a new API key)."""
    answer = QMessageBox.question(parent, title, text, defaultButton=QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes
