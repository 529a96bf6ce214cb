"""The dashboard: ten minutes of data at full rate without aborting or growing memory, values under the cursor,
the model filter, exports, and live samples from the real service in the main window."""

from __future__ import annotations

import csv
import gc
import math
from pathlib import Path
from typing import Any

import psutil
import pytest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.gui.dashboard_data import series_key
from app.gui.dashboard_panel import DashboardPanel
from app.gui.main_window import MainWindow

T0 = 1_760_000_000.0
TEN_MINUTES = 600


def sample(second: int) -> dict[str, Any]:
    """One tick as the service publishes it: two models, the machine, and one GPU with a KV-cache engine."""
    wave = math.sin(second / 30)
    points: list[list[Any]] = []
    for model, base in (("alpha", 40.0), ("beta", 20.0)):
        points += [
            ["generation_tokens_per_s", {"model": model}, base + 10 * wave],
            ["ttft_p50_s", {"model": model}, 0.05 + 0.01 * wave],
            ["process_cpu_percent", {"model": model}, 50 + 40 * wave],
            ["process_rss_bytes", {"model": model}, 2**30 + 2**20 * second],
        ]
    points += [
        ["system_cpu_percent", {}, 60 + 30 * wave],
        ["system_memory_used_bytes", {}, 8 * 2**30],
        ["gpu_memory_used_bytes", {"gpu": "0"}, 20 * 2**30],
        ["gpu_process_memory_bytes", {"gpu": "0", "model": "alpha"}, 18 * 2**30],
        ["engine_kv_cache_usage", {"model": "alpha"}, 0.5 + 0.4 * wave],
    ]
    return {"type": "sample", "t": T0 + second, "points": points}


def feed(panel: DashboardPanel, seconds: range, repaint_every: int = 1) -> None:
    """One refresh per sample, as the panel's timer does with samples arriving once a second."""
    for second in seconds:
        panel.add_sample(sample(second))
        panel.refresh()
        if second % repaint_every == 0:
            panel.plot_layout.repaint()
            QApplication.processEvents()


def shown_panel(qtbot: QtBot) -> DashboardPanel:
    panel = DashboardPanel()
    qtbot.addWidget(panel)
    panel.resize(1000, 700)
    panel.show()
    qtbot.waitExposed(panel)
    panel.refresh_timer.stop()  # the test drives every refresh itself
    return panel


def test_ten_minutes_at_full_rate_without_growing_memory(qtbot: QtBot) -> None:
    panel = shown_panel(qtbot)
    # The buffers, curves and caches reach their working size; then ten minutes more, each one drawn.
    feed(panel, range(TEN_MINUTES), repaint_every=20)
    gc.collect()
    rss_before, objects_before = psutil.Process().memory_info().rss, len(gc.get_objects())
    feed(panel, range(TEN_MINUTES, 2 * TEN_MINUTES))
    gc.collect()
    rss_grown = psutil.Process().memory_info().rss - rss_before
    objects_grown = len(gc.get_objects()) - objects_before

    # tracemalloc would triple the run time; Python objects and RSS catch what a per-sample leak leaves behind.
    assert objects_grown < 1000, f"{objects_grown} more Python objects after ten minutes of samples"
    assert rss_grown < 40 * 2**20, f"RSS grew by {rss_grown / 2**20:.1f} MiB"
    assert panel.curve_count() == 13
    assert panel.chart_shown("gpu") and panel.chart_shown("kv")
    x, y = panel.curve_data(series_key("engine_kv_cache_usage", {"model": "alpha"}))
    assert len(x) == 2 * TEN_MINUTES and x[-1] == T0 + 2 * TEN_MINUTES - 1
    assert min(y) >= 10 and max(y) <= 90  # a 0-1 fraction shown in percent
    (left, right), _ = panel.plots["throughput"].viewRange()
    assert right == x[-1] and abs(right - left - panel.window_s) < 1e-6


def test_cursor_filter_pause_and_exports(qtbot: QtBot, tmp_path: Path) -> None:
    panel = shown_panel(qtbot)
    feed(panel, range(120), repaint_every=30)
    text = panel.show_values_at(T0 + 60.2, "throughput")
    assert "generation_tokens_per_s model=alpha: " in text and "model=beta" in text
    assert f"{40 + 10 * math.sin(60 / 30):.4g} tokens/s" in text

    panel.model_combo.setCurrentText("beta")
    assert panel.model_filter == "beta"
    shown = {dict(labels).get("model") for _, labels in panel.visible_keys()}
    assert shown == {"beta", None}  # machine-wide series stay
    assert "alpha" not in panel.show_values_at(T0 + 60, "throughput")

    panel.pause_button.setChecked(True)
    count = panel.refresh_count
    feed(panel, range(120, 130), repaint_every=5)
    assert panel.refresh_count == count  # paused: the data still arrives, the charts hold still
    panel.pause_button.setChecked(False)
    assert panel.refresh_count == count + 1

    png = tmp_path / "charts.png"
    assert panel.export_png(png) and png.stat().st_size > 5_000
    rows = panel.export_csv(tmp_path / "data.csv")
    with (tmp_path / "data.csv").open(encoding="utf-8") as handle:
        read = list(csv.DictReader(handle))
    assert len(read) == rows > 0
    assert {row["series"] for row in read} >= {"generation_tokens_per_s", "system_cpu_percent"}
    assert all("alpha" not in row["labels"] for row in read)


def test_history_answer_then_live_samples(qtbot: QtBot) -> None:
    panel = shown_panel(qtbot)
    history = {"series": [{"name": "system_cpu_percent", "labels": {}, "t": [T0, T0 + 1, T0 + 2], "v": [1, 2, 3]}]}
    panel.load_history(history)
    panel.add_sample({"t": T0 + 2, "points": [["system_cpu_percent", {}, 99.0]]})  # already in the history
    panel.add_sample({"t": T0 + 3, "points": [["system_cpu_percent", {}, 4.0]]})
    panel.refresh()
    assert panel.curve_data(series_key("system_cpu_percent", {})) == ([T0, T0 + 1, T0 + 2, T0 + 3], [1, 2, 3, 4])
    assert not panel.chart_shown("gpu")  # no GPU series: no GPU chart


def test_prompt_cache_reuse_chart_appears_with_its_first_series_in_percent(qtbot: QtBot) -> None:
    panel = shown_panel(qtbot)
    panel.add_sample({"t": T0, "points": [["system_cpu_percent", {}, 5.0]]})
    panel.refresh()
    assert not panel.chart_shown("cache")  # no engine has reported cached prompt tokens: no chart, no guess
    for second, share in ((1, 0.0), (2, 0.5), (3, 0.92)):
        panel.add_sample({"t": T0 + second, "points": [["prompt_cache_reuse", {"model": "alpha"}, share]]})
        panel.refresh()
    assert panel.chart_shown("cache")
    x, y = panel.curve_data(series_key("prompt_cache_reuse", {"model": "alpha"}))
    assert x == [T0 + 1, T0 + 2, T0 + 3] and y == pytest.approx([0.0, 50.0, 92.0])  # a 0-1 share in percent
    assert "prompt_cache_reuse model=alpha: 92 %" in panel.show_values_at(T0 + 3, "cache")
    assert panel.plots["cache"].titleLabel.text == "Prompt cache reuse"


def test_dashboard_in_the_main_window_shows_live_samples(qtbot: QtBot, main_window: MainWindow) -> None:
    main_window.dashboard_action.trigger()
    panel = main_window.dashboard_panel
    assert main_window.tabs.currentWidget() is panel
    key = series_key("system_cpu_percent", {})
    qtbot.waitUntil(lambda: panel.curve_count() > 0 and key in panel.visible_keys(), timeout=15_000)
    qtbot.waitUntil(lambda: len(panel.curve_data(key)[0]) >= 2, timeout=15_000)
