"""What the window remembers between runs that is not a setting: whether a model was ever launched here, and
which hints the user has hidden."""

from __future__ import annotations

import hashlib

from PySide6.QtCore import QSettings

from app.paths import AppPaths

STATE_FILE = "gui-state.ini"
EVER_LAUNCHED_KEY = "home/ever_launched"


class GuiState:
    """A small INI file in ModelDeck's config folder (under MODELDECK_HOME when set), not Qt's per-user store,
    so that each installation and each test has its own."""

    def __init__(self, paths: AppPaths) -> None:
        self._settings = QSettings(str(paths.config / STATE_FILE), QSettings.Format.IniFormat)

    @property
    def ever_launched(self) -> bool:
        """True once some model has been seen ready: the first-run offer is not shown again."""
        return str(self._settings.value(EVER_LAUNCHED_KEY, "false")).lower() == "true"

    def mark_launched(self) -> None:
        if not self.ever_launched:
            self._settings.setValue(EVER_LAUNCHED_KEY, "true")
            self._settings.sync()

    def hint_hidden(self, name: str, text: str) -> bool:
        """Whether the user hid hint `name` while it said `text` (a hint that says something new shows again)."""
        return str(self._settings.value(_hint_key(name), "")) == _digest(text)

    def hide_hint(self, name: str, text: str) -> None:
        self._settings.setValue(_hint_key(name), _digest(text))
        self._settings.sync()


def _hint_key(name: str) -> str:
    return f"hints/{name}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
