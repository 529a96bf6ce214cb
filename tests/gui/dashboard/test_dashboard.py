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
from PySide6.QtWidgets import QApplication, QFileDialog
from pytestqt.qtbot import QtBot

from app.gui.dashboard.dashboard_data import series_key
from app.gui.dashboard.dashboard_panel import RAW_WINDOW_S, DashboardPanel
from app.gui.settings.theme import apply_theme
from app.gui.shell.main_window import MainWindow

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
    assert "alpha: generated: " in text and "beta: generated" in text
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


def test_an_export_that_cannot_be_written_says_so(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    panel = shown_panel(qtbot)
    feed(panel, range(5))
    chosen = tmp_path / "gone" / "export"  # the folder was removed after the save dialog showed it
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *_args: (str(chosen), ""))
    for button, what in ((panel.csv_button, "data"), (panel.png_button, "charts")):
        with qtbot.waitSignal(panel.sig_exported) as exported:
            button.click()
        assert exported.args is not None
        assert exported.args[0].startswith(f"Could not save the {what} to {chosen}")
    assert not chosen.parent.exists()


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
    assert "alpha: 92 %" in panel.show_values_at(T0 + 3, "cache")
    assert panel.plots["cache"].titleLabel.text == "Prompt cache reuse"


def test_dashboard_in_the_main_window_shows_live_samples(qtbot: QtBot, main_window: MainWindow) -> None:
    main_window.dashboard_action.trigger()
    panel = main_window.dashboard_panel
    assert main_window.tabs.currentWidget() is panel
    key = series_key("system_cpu_percent", {})
    qtbot.waitUntil(lambda: panel.curve_count() > 0 and key in panel.visible_keys(), timeout=15_000)
    qtbot.waitUntil(lambda: len(panel.curve_data(key)[0]) >= 2, timeout=15_000)


def legend_texts(panel: DashboardPanel, chart_key: str) -> list[str]:
    return [label.text for _, label in panel.plots[chart_key].legend.items]


def test_series_titled_in_words_with_units_of_their_axis_and_one_colour_per_model(qtbot: QtBot) -> None:
    panel = shown_panel(qtbot)
    feed(panel, range(5))
    assert legend_texts(panel, "throughput") == ["alpha: generated", "beta: generated"]
    assert set(legend_texts(panel, "ttft")) == {"alpha: median", "beta: median"}
    assert "whole machine" in legend_texts(panel, "cpu")
    every = [text for key in panel.plots for text in legend_texts(panel, key)]
    assert not [text for text in every if "_" in text or "=" in text], every  # no raw series names
    # TTFT arrives in seconds and is drawn on the axis it names: milliseconds.
    assert panel.plots["ttft"].getAxis("left").labelText == "ms"
    assert panel.curve_data(series_key("ttft_p50_s", {"model": "alpha"}))[1][0] == pytest.approx(50.0)
    assert panel.plots["throughput"].getAxis("left").labelText == "tokens/s"
    # One colour per model in every chart; the two models apart.
    names = ("generation_tokens_per_s", "ttft_p50_s", "process_cpu_percent", "process_rss_bytes")
    alpha = {panel.curve(series_key(name, {"model": "alpha"})).opts["pen"].color().name() for name in names}
    beta = panel.curve(series_key("generation_tokens_per_s", {"model": "beta"})).opts["pen"].color().name()
    assert alpha == {panel.model_colour("alpha")} and beta == panel.model_colour("beta") != panel.model_colour("alpha")


def test_tiles_show_the_latest_numbers_and_a_gpu_tile_only_with_a_gpu(qtbot: QtBot) -> None:
    panel = shown_panel(qtbot)
    panel.add_sample({"t": T0, "points": [["system_memory_used_bytes", {}, 6 * 2**30],
                                          ["system_memory_total_bytes", {}, 16 * 2**30]]})  # fmt: skip
    panel.refresh()
    assert panel.tiles.tiles["gpu_memory"].isHidden()
    assert panel.tiles.text_of("tokens_per_s") == "\N{EM DASH}"  # no model has served yet: no number made up
    feed(panel, range(1, 4))
    wave = math.sin(3 / 30)
    assert panel.tiles.text_of("tokens_per_s") == f"{60 + 20 * wave:.1f} tokens/s"  # both models together
    assert panel.tiles.text_of("ttft_p50") == f"{(0.05 + 0.01 * wave) * 1000:.0f} ms"
    assert panel.tiles.text_of("ram") == "8.0 GiB of 16.0 GiB"
    assert not panel.tiles.tiles["gpu_memory"].isHidden() and panel.tiles.text_of("gpu_memory") == "20.0 GiB"
    panel.model_combo.setCurrentText("beta")
    assert panel.tiles.text_of("tokens_per_s") == f"{20 + 10 * wave:.1f} tokens/s"


def test_an_empty_chart_says_so_and_an_idle_one_counts_from_zero(qtbot: QtBot) -> None:
    panel = shown_panel(qtbot)
    panel.refresh()
    assert all(panel.chart_says_empty(key) for key in ("throughput", "ttft", "cpu", "ram"))
    for second in range(30):  # a model loaded and idle: zero tokens/s
        panel.add_sample({"t": T0 + second, "points": [["generation_tokens_per_s", {"model": "alpha"}, 0.0],
                                                       ["system_cpu_percent", {}, 3.0]]})  # fmt: skip
        panel.refresh()
    assert not panel.chart_says_empty("throughput") and not panel.chart_says_empty("cpu")
    assert panel.chart_says_empty("ttft")  # no request yet: no TTFT
    QApplication.processEvents()
    (low, high) = panel.plots["throughput"].viewRange()[1]
    assert low >= 0 and high > 0, (low, high)
    assert panel.plots["throughput"].getAxis("left").autoSIPrefixScale == 1.0  # no "(x0.001)" on the axis


def test_minute_averages_are_drawn_as_steps_beyond_an_hour(qtbot: QtBot) -> None:
    panel = shown_panel(qtbot)
    key = series_key("generation_tokens_per_s", {"model": "alpha"})
    minutes = [T0 + 60 * i for i in range(5)]
    panel.load_history({"series": [{"name": key[0], "labels": {"model": "alpha"}, "t": minutes, "v": [1, 5, 2, 8, 3]}]})
    panel.refresh()
    assert panel.curve(key).opts["stepMode"] is None  # 10 minutes: one point a second, joined
    panel.window_combo.setCurrentIndex(3)
    assert panel.window_s > RAW_WINDOW_S
    panel.load_history({"series": [{"name": key[0], "labels": {"model": "alpha"}, "t": minutes, "v": [1, 5, 2, 8, 3]}]})
    panel.refresh()
    curve = panel.curve(key)
    assert curve.opts["stepMode"] is not None
    # Drawn as steps: each average held flat over its minute, rising at the next minute's start.
    path = curve.curve.getPath()
    drawn = [(path.elementAt(i).x, path.elementAt(i).y) for i in range(min(4, path.elementCount()))]
    assert drawn == [(minutes[0], 1), (minutes[1], 1), (minutes[1], 5), (minutes[2], 5)], drawn


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_charts_follow_the_window_theme(qtbot: QtBot, theme: str) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    panel = shown_panel(qtbot)
    try:
        apply_theme(app, theme)
        QApplication.processEvents()
        background, text = panel.chart_colours()
        assert (background.lightness() > 128) == (theme == "light"), background.name()
        assert abs(background.lightness() - text.lightness()) > 100  # text readable on it
    finally:
        apply_theme(app, "system")
