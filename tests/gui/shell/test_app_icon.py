"""ModelDeck's icon: drawn from its one SVG at any size Qt asks for, on the window and (with the service's state as
its badge) the tray; the SVG in resources/ is the one the app draws, and the desktop entry names it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize
from PySide6.QtGui import QColor, QIcon
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.gui.shell.app_icon import BADGE_COLOURS, ICON_SVG, app_icon, tray_state
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID

RESOURCES = Path(__file__).resolve().parents[3] / "resources"
FRONT_CARD = QColor("#3d8bd1")
READY_TIMEOUT_MS = 60_000


def colour_at(icon: QIcon, side: int, x: float, y: float) -> QColor:
    """The colour at (x, y), as fractions of the side, of the icon drawn `side` pixels wide."""
    image = icon.pixmap(QSize(side, side)).toImage()
    assert (image.width(), image.height()) == (side, side)
    return image.pixelColor(int(x * side), int(y * side))


def close_to(colour: QColor, expected: QColor) -> bool:
    return all(abs(a - b) <= 8 for a, b in zip(colour.getRgb()[:3], expected.getRgb()[:3], strict=True))


def test_the_icon_is_drawn_at_every_size_asked(qapp: QApplication) -> None:
    icon = app_icon()
    assert not icon.isNull() and QSize(16, 16) in icon.availableSizes() and QSize(256, 256) in icon.availableSizes()
    for side in (16, 22, 37, 64, 256, 512):  # 37: no size it offers; drawn for it all the same
        assert close_to(colour_at(icon, side, 0.3, 0.3), FRONT_CARD), side
        assert colour_at(icon, side, 0.97, 0.03).alpha() == 0, side  # the corner beside the cards is transparent


def test_the_tray_badge_says_the_services_state(qapp: QApplication) -> None:
    assert tray_state([]) == "idle" and tray_state(["stopped", None]) == "idle"
    assert tray_state(["stopped", "starting"]) == "serving" and tray_state(["ready"]) == "serving"
    assert tray_state(["ready", "failed"]) == "error"
    for state, colour in BADGE_COLOURS.items():
        assert close_to(colour_at(app_icon(state), 64, 0.8, 0.8), QColor(colour)), state
    assert close_to(colour_at(app_icon(), 64, 0.5, 0.85), QColor("#1e3a5f"))  # no badge on the window's icon


def test_resources_hold_the_icon_the_app_draws() -> None:
    assert (RESOURCES / "modeldeck.svg").read_text(encoding="utf-8") == ICON_SVG  # installers/make_icons.py
    assert "Icon=modeldeck\n" in (RESOURCES / "modeldeck.desktop").read_text(encoding="utf-8")


def test_window_and_tray_carry_the_icon(qtbot: QtBot, main_window: MainWindow) -> None:
    window, tray = main_window, main_window.tray
    assert close_to(colour_at(window.windowIcon(), 48, 0.3, 0.3), FRONT_CARD)
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "stopped")
    assert tray.state == "idle"
    window.connection.start_model(BUNDLED_ID)
    qtbot.waitUntil(lambda: tray.state == "serving", timeout=READY_TIMEOUT_MS)
    assert close_to(colour_at(tray.state_icon, 64, 0.8, 0.8), QColor(BADGE_COLOURS["serving"]))
