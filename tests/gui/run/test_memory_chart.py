"""The memory chart survives many repaints: the guard against PySide6 6.12's none_dealloc abort on 3.11."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.gui.run.memory_chart import MIB, MemoryChartPanel

REPAINTS = 1000


def test_chart_survives_a_thousand_repaints(qtbot: QtBot) -> None:
    chart = MemoryChartPanel()
    qtbot.addWidget(chart)
    chart.resize(480, 260)
    chart.show()
    qtbot.waitExposed(chart)
    times = [float(t) for t in range(60)]
    for frame in range(REPAINTS):
        rss = [float((100 + (t + frame) % 50) * MIB) for t in range(60)]
        chart.show_samples("Resident memory: test", times, rss)
        chart.plot_widget.repaint()
        QApplication.processEvents()

    x, y = chart.curve_data()
    last = REPAINTS - 1
    assert x == [t - 59.0 for t in times]
    assert y == [float(100 + (t + last) % 50) for t in range(60)]
    assert chart.title_label.text() == "Resident memory: test"
