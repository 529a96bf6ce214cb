"""Writes ModelDeck's application icon (its SVG is app.gui.shell.app_icon.ICON_SVG) as the files each platform's
package takes: resources/modeldeck.svg and modeldeck.png (Linux desktop entry, scalable and 256 px), modeldeck.ico
(Windows), modeldeck.icns (macOS).

Run once when the design changes: `QT_QPA_PLATFORM=offscreen .venv/bin/python installers/make_icons.py`; the files
are committed, so packaging needs no drawing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QSize
from PySide6.QtGui import QGuiApplication, QImage

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app.gui.shell.app_icon import ICON_SVG, app_icon  # noqa: E402 (the checkout, not an installed copy)

RESOURCES = Path(__file__).resolve().parent.parent / "resources"


def draw(size: int) -> QImage:
    return app_icon().pixmap(QSize(size, size)).toImage()


def main() -> None:
    app = QGuiApplication(sys.argv[:1])
    (RESOURCES / "modeldeck.svg").write_text(ICON_SVG, encoding="utf-8")
    for name, size in (("modeldeck.png", 256), ("modeldeck.ico", 256), ("modeldeck.icns", 512)):
        if not draw(size).save(str(RESOURCES / name)):
            sys.exit(f"could not write {RESOURCES / name}")
    app.quit()


if __name__ == "__main__":
    main()
