"""Draws ModelDeck's application icon and writes it as the formats each platform's package takes:
resources/modeldeck.png (Linux desktop entry, 256 px), modeldeck.ico (Windows), modeldeck.icns (macOS).

Run once when the design changes: `QT_QPA_PLATFORM=offscreen .venv/bin/python installers/make_icons.py`; the files
are committed, so packaging needs no drawing.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QGuiApplication, QImage, QPainter, QPen

RESOURCES = Path(__file__).resolve().parent.parent / "resources"


def draw(size: int) -> QImage:
    """A rounded deck of three cards with a rising chart line: local models, served and measured."""
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    unit = size / 16
    for index, colour in enumerate(("#1e3a5f", "#2b5d8f", "#3d8bd1")):
        offset = index * unit
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QBrush(QColor(colour)))
        painter.drawRoundedRect(QRectF(unit + offset, 3 * unit - offset, 11 * unit, 11 * unit), 1.6 * unit, 1.6 * unit)
    pen = QPen(QColor("#ffffff"), 1.1 * unit)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
    painter.setPen(pen)
    top = 3 * unit - 2 * unit
    points = [(5.5, 9.5), (7.5, 6.5), (9.5, 8.0), (12.0, 4.0)]
    for (x1, y1), (x2, y2) in itertools.pairwise(points):
        painter.drawLine(int(x1 * unit), int(top + y1 * unit), int(x2 * unit), int(top + y2 * unit))
    painter.end()
    return image


def main() -> None:
    app = QGuiApplication(sys.argv[:1])
    for name, size in (("modeldeck.png", 256), ("modeldeck.ico", 256), ("modeldeck.icns", 512)):
        if not draw(size).save(str(RESOURCES / name)):
            sys.exit(f"could not write {RESOURCES / name}")
    app.quit()


if __name__ == "__main__":
    main()
