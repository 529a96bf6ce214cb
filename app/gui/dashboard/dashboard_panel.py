"""The live dashboard: headline tiles, then throughput, TTFT, CPU, RAM, GPU memory by process, KV-cache use and
prompt cache reuse, over a chosen window.

Series are titled in words (`alpha: generated`), each model keeps one colour in every chart, the charts take
the window's palette (no black plot in a light window), minute averages are drawn as steps, and a chart with
nothing to draw in its window says so instead of showing an empty axis.

Cheap by construction: samples only land in fixed buffers as they arrive; one QTimer (2 Hz, running only while
the panel is visible and not paused) pushes changed buffers to curves created once, with `setData`,
clip-to-view and automatic downsampling.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QColor, QHideEvent, QPalette, QShowEvent
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.api_types import SampleEvent, SeriesAnswer
from app.gui.connection.latest_call import LatestCall
from app.gui.connection.service_connection import ServiceConnection
from app.gui.dashboard.dashboard_charts import (
    CHART_OF_NAME,
    CHARTS,
    DASHED,
    DOTTED,
    MODEL_COLOURS,
    SERVICE_COLOUR,
    ChartSpec,
)
from app.gui.dashboard.dashboard_data import DashboardData, SeriesKey, series_model, series_title
from app.gui.dashboard.dashboard_tiles import DashboardTiles, tile_values

REFRESH_MS = 500
WINDOWS = (("1 min", 60), ("10 min", 600), ("1 h", 3600), ("24 h", 86400))
RAW_WINDOW_S = 3600  # beyond this the service answers with minute averages, so the history is fetched again
REFETCH_LONG_WINDOW_S = 60.0
ALL_MODELS = "All models"
EMPTY_TEXT = "No data in this window"


class DashboardPanel(QWidget):
    """Charts of the service's metrics. Data comes from `ServiceConnection` only (history and live samples)."""

    sig_exported = Signal(str)  # what was written, or why it could not be, in words

    def __init__(self, connection: ServiceConnection | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data = DashboardData()
        self.window_s = 600
        self.model_filter: str | None = None
        self.refresh_count = 0
        self._connection = connection
        self._history = LatestCall(connection, self) if connection is not None else None
        self._last_fetch = 0.0
        self._curves: dict[SeriesKey, pg.PlotDataItem] = {}
        self._model_colours: dict[str, str] = {}
        self._empty_labels: dict[str, pg.TextItem] = {}
        self._known_models: set[str] = set()
        self._shown_range = (0.0, 0.0)
        self._last_draw = 0.0

        self.window_combo = QComboBox()
        for text, seconds in WINDOWS:
            self.window_combo.addItem(text, seconds)
        self.window_combo.setCurrentIndex(1)
        self.window_combo.setAccessibleName("Time window of the charts")
        self.model_combo = QComboBox()
        self.model_combo.addItem(ALL_MODELS)
        self.model_combo.setAccessibleName("Model shown in the charts")
        self.pause_button = QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.setAccessibleName("Pause the charts")
        self.png_button = QPushButton("Export PNG\N{HORIZONTAL ELLIPSIS}")
        self.csv_button = QPushButton("Export CSV\N{HORIZONTAL ELLIPSIS}")
        self.png_button.setAccessibleName("Export the charts as a PNG image")
        self.csv_button.setAccessibleName("Export the charts' data as CSV")
        self.cursor_label = QLabel("Point at a chart to read its values.")
        self.cursor_label.setWordWrap(True)
        self.cursor_label.setAccessibleName("Values under the cursor")
        self.tiles = DashboardTiles()
        self.plot_layout = pg.GraphicsLayoutWidget()
        self.plot_layout.setAccessibleName("Charts")
        self.plots: dict[str, pg.PlotItem] = {}
        self._cursor_lines: dict[str, pg.InfiniteLine] = {}
        self._build()
        self.refresh_timer = QTimer(self)
        self.refresh_timer.setInterval(REFRESH_MS)
        self.refresh_timer.timeout.connect(self._on_refresh_timer_timeout)
        self.window_combo.currentIndexChanged.connect(self._on_window_combo_changed)
        self.model_combo.currentTextChanged.connect(self._on_model_combo_changed)
        self.pause_button.toggled.connect(self._on_pause_button_toggled)
        self.png_button.clicked.connect(self._on_png_button_clicked)
        self.csv_button.clicked.connect(self._on_csv_button_clicked)
        self.plot_layout.scene().sigMouseMoved.connect(self._on_scene_mouse_moved)
        if connection is not None:
            connection.sig_sample_received.connect(self._on_connection_sample_received)
            connection.sig_status_changed.connect(self._on_connection_status_changed)

    def _build(self) -> None:
        controls = QHBoxLayout()
        for label, widget in (("Window", self.window_combo), ("Model", self.model_combo)):
            buddy = QLabel(label)
            buddy.setBuddy(widget)
            controls.addWidget(buddy)
            controls.addWidget(widget)
        controls.addWidget(self.pause_button)
        controls.addStretch(1)
        controls.addWidget(self.png_button)
        controls.addWidget(self.csv_button)
        layout = QVBoxLayout(self)
        layout.addLayout(controls)
        layout.addWidget(self.tiles)
        layout.addWidget(self.plot_layout, 1)
        layout.addWidget(self.cursor_label)
        first: pg.PlotItem | None = None
        for chart in CHARTS:
            plot = pg.PlotItem(title=chart.title, axisItems={"bottom": pg.DateAxisItem(orientation="bottom")})
            plot.setLabel("left", chart.unit)
            # Every chart counts from zero in its own unit: no "(x0.001)" prefix and no -150..+150 when idle.
            plot.getAxis("left").enableAutoSIPrefix(False)
            plot.vb.setLimits(yMin=0, minYRange=1e-9)
            plot.showGrid(x=False, y=False)
            plot.setMouseEnabled(x=False, y=False)
            plot.setMenuEnabled(False)
            plot.setClipToView(True)
            plot.setDownsampling(auto=True, mode="peak")
            plot.addLegend(offset=(5, 5), labelTextSize="8pt")
            line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#888888", width=1))
            line.setVisible(False)
            plot.addItem(line, ignoreBounds=True)
            empty = pg.TextItem(EMPTY_TEXT, anchor=(0.5, 0.5))
            empty.setParentItem(plot.vb)  # in the view's pixels: centred whatever the data range
            plot.vb.sigResized.connect(self._on_view_resized)
            self._empty_labels[chart.key] = empty
            if first is None:
                first = plot
            else:
                plot.setXLink(first)
            self.plots[chart.key] = plot
            self._cursor_lines[chart.key] = line
            if not chart.optional:
                self._place(chart.key)
        self._apply_palette()

    def _place(self, chart_key: str) -> None:
        keys = [chart.key for chart in CHARTS]
        index = keys.index(chart_key)
        self.plot_layout.addItem(self.plots[chart_key], row=index // 2, col=index % 2)
        # The x axes are linked: dates under the lowest row only, which also halves the text drawn per frame.
        shown = [keys.index(key) for key in keys if key in self.plots and self.chart_shown(key)]
        last_row = max(i // 2 for i in shown)
        for i in shown:
            self.plots[keys[i]].getAxis("bottom").setStyle(showValues=i // 2 == last_row)

    def chart_shown(self, chart_key: str) -> bool:
        return self.plots[chart_key].scene() is not None

    # Theme ------------------------------------------------------------------------------------------------

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._apply_palette()

    def _apply_palette(self) -> None:
        """Charts in the window's colours: background of its text fields, axes and titles in its text colour."""
        palette = self.palette()
        background = palette.color(QPalette.ColorRole.Base)
        foreground = palette.color(QPalette.ColorRole.Text)
        self.plot_layout.setBackground(background)
        for chart in CHARTS:
            plot = self.plots[chart.key]
            for side in ("left", "bottom"):
                axis = plot.getAxis(side)
                axis.setPen(foreground)
                axis.setTextPen(foreground)
            plot.setTitle(chart.title, color=foreground)
            if plot.legend is not None:
                plot.legend.setLabelTextColor(foreground)
                for _sample, label in plot.legend.items:
                    label.setText(label.text, color=foreground)
            self._empty_labels[chart.key].setColor(foreground)
        for key, curve in self._curves.items():
            curve.setPen(self._pen(key))

    def chart_colours(self) -> tuple[QColor, QColor]:
        """The charts' background and text colour now."""
        axis = self.plots[CHARTS[0].key].getAxis("left")
        return QColor(self.plot_layout.backgroundBrush().color()), QColor(axis.textPen().color())

    def _pen(self, key: SeriesKey) -> Any:
        model = series_model(key)
        if model is not None:
            colour = QColor(self._model_colour(model))
        elif dict(key[1]).get("process") == "service":
            colour = QColor(SERVICE_COLOUR)
        else:
            colour = self.palette().color(QPalette.ColorRole.Text)
        pen = pg.mkPen(colour, width=1.5)
        if key[0] in DASHED:
            pen.setStyle(Qt.PenStyle.DashLine)
        elif key[0] in DOTTED:
            pen.setStyle(Qt.PenStyle.DotLine)
        return pen

    def _model_colour(self, model: str) -> str:
        colour = self._model_colours.get(model)
        if colour is None:
            colour = MODEL_COLOURS[len(self._model_colours) % len(MODEL_COLOURS)]
            self._model_colours[model] = colour
        return colour

    def model_colour(self, model: str) -> str | None:
        """The colour `model`'s series are drawn in, in every chart; None before its first series."""
        return self._model_colours.get(model)

    @Slot(object)
    def _on_view_resized(self, view: pg.ViewBox) -> None:
        for chart_key, plot in self.plots.items():
            if plot.vb is view:
                rect = view.boundingRect()
                self._empty_labels[chart_key].setPos(rect.center())

    # Data in ---------------------------------------------------------------------------------------------

    @Slot(object)
    def _on_connection_sample_received(self, event: SampleEvent) -> None:
        self.data.add_sample(event)

    @Slot(str)
    def _on_connection_status_changed(self, _status: str) -> None:
        if self._connection is not None and self._connection.is_connected and self.isVisible():
            self._fetch_history()

    def add_sample(self, event: SampleEvent) -> None:
        """Take one live sample event (what the connection delivers once a second)."""
        self.data.add_sample(event)

    def load_history(self, answer: SeriesAnswer) -> None:
        """Take an `/api/series` answer for the current window."""
        self.data.load(answer)

    def _fetch_history(self) -> None:
        if self._history is None:
            return
        self._last_fetch = time.monotonic()
        window = self.window_s
        self._history.run(
            lambda client: client.series(window, max_points=RAW_WINDOW_S),
            self._on_history_loaded,
            lambda _message: None,  # the connection reports a lost service itself; charts simply stay as they are
        )

    def _on_history_loaded(self, answer: SeriesAnswer) -> None:
        self.load_history(answer)
        self.refresh()

    # Drawing ---------------------------------------------------------------------------------------------

    @Slot()
    def _on_refresh_timer_timeout(self) -> None:
        if self.window_s > RAW_WINDOW_S and time.monotonic() - self._last_fetch >= REFETCH_LONG_WINDOW_S:
            self._fetch_history()
        # Redrawing before the window has moved by a pixel would change nothing visible: at 1 h on 500 pixels
        # that is one draw every 7 s rather than every second.
        width = max(1.0, float(self.plots[CHARTS[0].key].vb.width()))
        if time.monotonic() - self._last_draw >= self.window_s / width:
            self.refresh()

    def refresh(self) -> None:
        """Push changed series to their curves and move the window to the latest sample. Skipped while paused."""
        if self.pause_button.isChecked():
            return
        self._last_draw = time.monotonic()
        self.refresh_count += 1
        for key, buffer in self.data.changed():
            chart = CHART_OF_NAME.get(key[0])
            if chart is None:
                buffer.changed = False
                continue
            curve = self._curves.get(key) or self._new_curve(key, chart)
            t, v = buffer.view()
            # Beyond an hour the service answers with minute averages, each stamped at its minute's start:
            # a step holds each average over its minute instead of joining them with diagonals.
            # (pyqtgraph's "right": y[i] is held from x[i] to x[i + 1].)
            step = "right" if self.window_s > RAW_WINDOW_S else None
            curve.setData(t, v * chart.scale if chart.scale != 1.0 else v, stepMode=step)
            buffer.changed = False
        end = self.data.latest_time or time.time()
        shown = (end - self.window_s, end)
        if shown != self._shown_range:  # an unchanged range would still relayout every axis
            self._shown_range = shown
            self.plots[CHARTS[0].key].setXRange(*shown, padding=0)
        models = self.data.models()
        if models != self._known_models:
            self._known_models = models
            self._update_model_combo()
        self._show_empty_labels(shown[0])
        self.tiles.show_values(tile_values(self.data, self.model_filter))

    def _show_empty_labels(self, since: float) -> None:
        has_data: set[str] = set()
        for key, curve in self._curves.items():
            if curve.isVisible():
                times, _ = self.data.buffers[key].view()
                if len(times) and times[-1] >= since:
                    has_data.add(CHART_OF_NAME[key[0]].key)
        for chart_key, label in self._empty_labels.items():
            label.setVisible(chart_key not in has_data)

    def chart_says_empty(self, chart_key: str) -> bool:
        """Whether the chart shows its no-data message."""
        return bool(self._empty_labels[chart_key].isVisible())

    def _new_curve(self, key: SeriesKey, chart: ChartSpec) -> pg.PlotDataItem:
        if chart.optional and not self.chart_shown(chart.key):
            self._place(chart.key)
        plot = self.plots[chart.key]
        curve = plot.plot(pen=self._pen(key), name=series_title(key))
        if plot.legend is not None:
            colour = self.palette().color(QPalette.ColorRole.Text)
            for _sample, label in plot.legend.items[-1:]:
                label.setText(label.text, color=colour)
        curve.setVisible(self._matches(key))
        self._curves[key] = curve
        return curve

    def _matches(self, key: SeriesKey) -> bool:
        model = dict(key[1]).get("model")
        return self.model_filter is None or model is None or model == self.model_filter

    def _update_model_combo(self) -> None:
        current = self.model_combo.currentText()
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        self.model_combo.addItems([ALL_MODELS, *sorted(self._known_models)])
        self.model_combo.setCurrentText(current if current in self._known_models else ALL_MODELS)
        self.model_combo.blockSignals(False)

    def curve_count(self) -> int:
        return len(self._curves)

    def curve(self, key: SeriesKey) -> pg.PlotDataItem:
        return self._curves[key]

    def curve_data(self, key: SeriesKey) -> tuple[list[float], list[float]]:
        x, y = self._curves[key].getOriginalDataset()
        return ([], []) if x is None or y is None else ([float(a) for a in x], [float(b) for b in y])

    def visible_keys(self) -> list[SeriesKey]:
        return [key for key, curve in self._curves.items() if curve.isVisible()]

    # Controls --------------------------------------------------------------------------------------------

    @Slot(int)
    def _on_window_combo_changed(self, index: int) -> None:
        self.window_s = int(self.window_combo.itemData(index))
        self._fetch_history()
        self.refresh()

    @Slot(str)
    def _on_model_combo_changed(self, text: str) -> None:
        self.model_filter = None if text in (ALL_MODELS, "") else text
        for key, curve in self._curves.items():
            curve.setVisible(self._matches(key))
        self.refresh()

    @Slot(bool)
    def _on_pause_button_toggled(self, paused: bool) -> None:
        self.pause_button.setText("Resume" if paused else "Pause")
        if not paused:
            self.refresh()

    @Slot(object)
    def _on_scene_mouse_moved(self, position: QPointF) -> None:
        for chart_key, plot in self.plots.items():
            if plot.scene() is None or not plot.sceneBoundingRect().contains(position):
                continue
            x = float(plot.vb.mapSceneToView(position).x())
            self.show_values_at(x, chart_key)
            return

    def show_values_at(self, x: float, chart_key: str) -> str:
        """Show the values of the chart's visible series nearest to time `x`; return the text shown."""
        for line in self._cursor_lines.values():
            line.setPos(x)
            line.setVisible(True)
        chart = next(c for c in CHARTS if c.key == chart_key)
        parts = [time.strftime("%H:%M:%S", time.localtime(x))]
        for key in self.visible_keys():
            if CHART_OF_NAME.get(key[0]) is chart:
                value = self.data.buffers[key].value_at(x)
                if value is not None:
                    parts.append(f"{series_title(key)}: {value * chart.scale:.4g} {chart.unit}")
        text = "   ".join(parts)
        self.cursor_label.setText(text)
        return text

    def export_png(self, path: Path) -> bool:
        """Write the charts as they are shown to a PNG file."""
        return bool(self.plot_layout.grab().save(str(path), "PNG"))

    def export_csv(self, path: Path) -> int:
        """Write the shown series over the current window to CSV; return the rows written."""
        end = self.data.latest_time or time.time()
        return self.data.write_csv(path, self.visible_keys(), end - self.window_s)

    @Slot()
    def _on_png_button_clicked(self) -> None:
        name, _ = QFileDialog.getSaveFileName(self, "Export charts", "modeldeck-dashboard.png", "PNG (*.png)")
        if not name:
            return
        if self.export_png(Path(name)):
            self.sig_exported.emit(f"Saved the charts to {name}.")
        else:  # Qt gives no reason
            self.sig_exported.emit(f"Could not save the charts to {name}: is the folder there and writable?")

    @Slot()
    def _on_csv_button_clicked(self) -> None:
        name, _ = QFileDialog.getSaveFileName(self, "Export data", "modeldeck-metrics.csv", "CSV (*.csv)")
        if not name:
            return
        try:
            rows = self.export_csv(Path(name))
        except OSError as exc:
            self.sig_exported.emit(f"Could not save the data to {name}: {exc.strerror or exc}.")
            return
        self.sig_exported.emit(f"Saved {rows} points to {name}.")

    # Visibility: no drawing work at all while hidden --------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._fetch_history()
        self.refresh_timer.start()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.refresh_timer.stop()


__all__ = ["DashboardPanel"]
