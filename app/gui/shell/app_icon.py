"""ModelDeck's icon, drawn from one SVG at whatever size Qt asks for (window, taskbar, tray), and the tray's icon
with a badge that says what the service is doing: idle (grey), serving (green), a model failed (red).

The SVG lives here rather than only as a file so that every install has it (a wheel carries no `resources/`);
installers/make_icons.py writes it to resources/modeldeck.svg, with the raster files the packages take.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from PySide6.QtCore import QByteArray, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QIcon, QIconEngine, QPainter, QPen, QPixmap
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
_SIZES = (16, 22, 24, 32, 48, 64, 128, 256)


class _SvgIconEngine(QIconEngine):
    """Renders the SVG at the size asked, with the badge in the lower right corner when there is one."""

    def __init__(self, badge: TrayState | None) -> None:
        super().__init__()
        self._badge = badge
        self._renderer = QSvgRenderer(QByteArray(ICON_SVG.encode()))

    def paint(self, painter: QPainter, rect: QRect, mode: QIcon.Mode, state: QIcon.State) -> None:
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        self._renderer.render(painter, QRectF(rect))
        if self._badge is not None:
            side = rect.width() * 0.42
            badge = QRectF(rect.right() - side, rect.bottom() - side, side, side)
            painter.setPen(QPen(QColor("#ffffff"), max(1.0, side / 8)))
            painter.setBrush(QColor(BADGE_COLOURS[self._badge]))
            painter.drawEllipse(badge.adjusted(1, 1, -1, -1))

    def pixmap(self, size: QSize, mode: QIcon.Mode, state: QIcon.State) -> QPixmap:
        pixmap = QPixmap(size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        self.paint(painter, QRect(0, 0, size.width(), size.height()), mode, state)
        painter.end()
        return pixmap

    def availableSizes(self, mode: QIcon.Mode = QIcon.Mode.Normal, state: QIcon.State = QIcon.State.Off) -> list[QSize]:
        return [QSize(side, side) for side in _SIZES]

    def clone(self) -> QIconEngine:
        return _SvgIconEngine(self._badge)


def app_icon(badge: TrayState | None = None) -> QIcon:
    return QIcon(_SvgIconEngine(badge))


def tray_state(states: Iterable[str | None]) -> TrayState:
    """The service's state for the tray: a failed model first (it needs the user), then any model serving."""
    seen = set(states)
    if ModelState.FAILED in seen:
        return "error"
    return "serving" if seen & ACTIVE else "idle"
