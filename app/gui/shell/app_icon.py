"""ModelDeck's icon, drawn from one SVG at whatever size Qt asks for (window, taskbar, tray), and the tray's icon
with a badge that says what the service is doing: idle (grey), serving (green), a model failed (red).

The SVG lives here rather than only as a file so that every install has it (a wheel carries no `resources/`);
installers/make_icons.py writes it to resources/modeldeck.svg, with the raster files the packages take.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from PySide6.QtCore import QByteArray, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap
from PySide6.QtSvg import QSvgRenderer

from app.api_types import ACTIVE, ModelState

ICON_SVG = """\
<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256" viewBox="0 0 16 16">
  <title>ModelDeck</title>
  <rect x="1" y="3" width="11" height="11" rx="1.6" fill="#1e3a5f"/>
  <rect x="2" y="2" width="11" height="11" rx="1.6" fill="#2b5d8f"/>
  <rect x="3" y="1" width="11" height="11" rx="1.6" fill="#3d8bd1"/>
  <polyline points="5.5,10.5 7.5,7.5 9.5,9 12,5" fill="none" stroke="#ffffff" stroke-width="1.1"
            stroke-linecap="round" stroke-linejoin="round"/>
</svg>
"""
TrayState = Literal["idle", "serving", "error"]
BADGE_COLOURS: dict[TrayState, str] = {"idle": "#8a8f98", "serving": "#2e9d4f", "error": "#d64541"}
# What a desktop is offered when it asks which sizes there are (X11 sends each to the window manager).
_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)


def app_icon(badge: TrayState | None = None) -> QIcon:
    """The icon as pixmaps drawn from the SVG at each size a desktop asks for (Qt scales between them). Pixmaps, not
    a QIconEngine subclass: a Python engine is deleted by the QIcon that owns it, and the garbage collector then
    touching its wrapper crashed the window (seen in the tray's test)."""
    renderer = QSvgRenderer(QByteArray(ICON_SVG.encode()))
    icon = QIcon()
    for side in _SIZES:
        pixmap = QPixmap(QSize(side, side))
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter, QRectF(0, 0, side, side))
        if badge is not None:
            edge = side * 0.42
            painter.setPen(QPen(QColor("#ffffff"), max(1.0, edge / 8)))
            painter.setBrush(QColor(BADGE_COLOURS[badge]))
            painter.drawEllipse(QRectF(side - edge, side - edge, edge, edge).adjusted(1, 1, -1, -1))
        painter.end()
        icon.addPixmap(pixmap)
    return icon


def tray_state(states: Iterable[str | None]) -> TrayState:
    """The service's state for the tray: a failed model first (it needs the user), then any model serving."""
    seen = set(states)
    if ModelState.FAILED in seen:
        return "error"
    return "serving" if seen & ACTIVE else "idle"
