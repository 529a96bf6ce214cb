"""A chart of the selected engine's resident memory over time."""

from __future__ import annotations

from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

MIB = 1024 * 1024


class MemoryChartPanel(QWidget):
    """One pyqtgraph curve, created once and updated with `setData` (never re-created per sample)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title_label = QLabel("Resident memory")
        self.plot_widget = pg.PlotWidget()
        self.plot_widget.setMinimumHeight(140)
        self.plot_widget.setMouseEnabled(x=False, y=False)
        self.plot_widget.setMenuEnabled(False)
        self.plot_widget.showGrid(x=True, y=True, alpha=0.2)
        self.plot_widget.setLabel("left", "MiB")
        self.plot_widget.setLabel("bottom", "seconds (0 = latest sample)")
        self.curve = self.plot_widget.plot(pen=pg.mkPen("#2e86de", width=2))
        self.curve.setClipToView(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title_label)
        layout.addWidget(self.plot_widget)

    def show_samples(self, title: str, times_s: Sequence[float], rss_bytes: Sequence[float]) -> None:
        """Plot samples taken at `times_s` (monotonic seconds), relative to the latest one."""
        self.title_label.setText(title)
        if not times_s:
            self.curve.setData([], [])
            return
        latest = times_s[-1]
        self.curve.setData([t - latest for t in times_s], [v / MIB for v in rss_bytes])

    def curve_data(self) -> tuple[list[float], list[float]]:
        """The curve's points (x in seconds, y in MiB), as plotted."""
        x, y = self.curve.getData()
        if x is None or y is None:
            return [], []
        return [float(v) for v in x], [float(v) for v in y]
