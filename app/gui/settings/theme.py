"""The window's theme: follow the system, light or dark.

The colour scheme is asked of the platform through QStyleHints (Qt >= 6.8), which native styles follow; the palette
is set as well, because some platforms (offscreen, older desktops, the Fusion style) ignore the hint.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

THEMES = ("system", "light", "dark")
THEME_LABELS = {"system": "Follow the system", "light": "Light", "dark": "Dark"}

_DARK = {
    QPalette.ColorRole.Window: "#2b2b2b",
    QPalette.ColorRole.WindowText: "#e6e6e6",
    QPalette.ColorRole.Base: "#1e1e1e",
    QPalette.ColorRole.AlternateBase: "#2f2f2f",
    QPalette.ColorRole.ToolTipBase: "#3a3a3a",
    QPalette.ColorRole.ToolTipText: "#f0f0f0",
    QPalette.ColorRole.PlaceholderText: "#8a8a8a",
    QPalette.ColorRole.Text: "#e6e6e6",
    QPalette.ColorRole.Button: "#353535",
    QPalette.ColorRole.ButtonText: "#e6e6e6",
    QPalette.ColorRole.BrightText: "#ff6b6b",
    QPalette.ColorRole.Link: "#6cb4ff",
    QPalette.ColorRole.Highlight: "#3d7bd9",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.Light: "#4a4a4a",
    QPalette.ColorRole.Midlight: "#3f3f3f",
    QPalette.ColorRole.Mid: "#303030",
    QPalette.ColorRole.Dark: "#1a1a1a",
    QPalette.ColorRole.Shadow: "#000000",
}
_DISABLED_TEXT = "#7a7a7a"


def dark_palette() -> QPalette:
    palette = QPalette()
    for role, colour in _DARK.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor(_DISABLED_TEXT))
    return palette


def apply_theme(app: QApplication, theme: str) -> None:
    """Apply `theme` ("system", "light" or "dark") to the whole application at once."""
    if theme not in THEMES:
        raise ValueError(f"unknown theme {theme!r}; expected one of {', '.join(THEMES)}")
    hints = app.styleHints()
    if theme == "system":
        hints.unsetColorScheme()
        app.setPalette(QPalette())  # nothing set: every role resolves to the platform's palette again
    elif theme == "dark":
        hints.setColorScheme(Qt.ColorScheme.Dark)
        app.setPalette(dark_palette())
    else:
        hints.setColorScheme(Qt.ColorScheme.Light)
        app.setPalette(QPalette(QColor("#efefef")))  # a light palette derived from a light window colour


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128
