"""Two charts of a concurrency sweep: output throughput, and time to first token (p50 and p99), against concurrency.

Curves are created once and fed with `setData`; the x axis is logarithmic, as sweeps double or quadruple.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.api_types import BenchLevel


class BenchChartsPanel(QWidget):
    """Throughput and TTFT against concurrency for one sweep's levels."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot_layout = pg.GraphicsLayoutWidget()
        self.throughput_plot = self._plot("Output throughput", "tokens/s", 0)
        self.ttft_plot = self._plot("Time to first token", "ms", 1)
        self.throughput_plot.setXLink(self.ttft_plot)
        symbol = {"symbol": "o", "symbolSize": 7}
        self.throughput_curve = self.throughput_plot.plot(pen=pg.mkPen("#2a7fd4", width=2), symbolBrush="#2a7fd4",
                                                          name="output tok/s", **symbol)  # fmt: skip
        self.ttft_p50_curve = self.ttft_plot.plot(pen=pg.mkPen("#d4702a", width=2), symbolBrush="#d4702a",
                                                  name="p50", **symbol)  # fmt: skip
        dashed = pg.mkPen("#a0522d", width=1.5)
        dashed.setStyle(Qt.PenStyle.DashLine)
        self.ttft_p99_curve = self.ttft_plot.plot(pen=dashed, symbolBrush="#a0522d", name="p99", **symbol)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot_layout)

    def _plot(self, title: str, unit: str, column: int) -> pg.PlotItem:
        plot = self.plot_layout.addPlot(row=0, col=column, title=title)
        plot.setLabel("left", unit)
        plot.setLabel("bottom", "concurrency")
        plot.setLogMode(x=True, y=False)
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.addLegend(offset=(5, 5), labelTextSize="8pt")
        return plot

    def show_levels(self, levels: list[BenchLevel]) -> None:
        """Draw the levels measured so far (any order; drawn by concurrency)."""
        ordered = sorted(levels, key=lambda level: int(level["concurrency"]))
        x = [float(level["concurrency"]) for level in ordered]
        self.throughput_curve.setData(x, [float(level["output_tokens_per_s"]) for level in ordered])
        for curve, percentile in ((self.ttft_p50_curve, _ttft_p50), (self.ttft_p99_curve, _ttft_p99)):
            known = [(level["concurrency"], ttft) for level in ordered if (ttft := percentile(level)) is not None]
            curve.setData([float(concurrency) for concurrency, _ in known], [ttft * 1000 for _, ttft in known])

    def points(self, curve: pg.PlotDataItem) -> list[tuple[float, float]]:
        """A curve's points as given (concurrency, value)."""
        x, y = curve.getOriginalDataset()
        return [] if x is None or y is None else [(float(a), float(b)) for a, b in zip(x, y, strict=True)]


def _ttft_p50(level: BenchLevel) -> float | None:
    return level.get("ttft_p50_s")


def _ttft_p99(level: BenchLevel) -> float | None:
    return level.get("ttft_p99_s")
