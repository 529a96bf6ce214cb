"""The Benchmark page against the real service on the bundled model: a sweep run from the page fills the table and
charts, the cards are listed and two are compared side by side, Cancel stops a run, bad levels are refused; the GUI
thread keeps answering while a sweep runs (tests/gui/block_meter.py)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.bench.bench_format import CARD_COLUMNS, LEVEL_COLUMNS
from app.gui.bench.benchmark_page import PROGRESS_STEPS, BenchmarkPage
from app.gui.connection.service_connection import ServiceConnection
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.gui.block_meter import BlockMeter

RUN_TIMEOUT_MS = 600_000  # a busy 2-core machine decodes the bundled model at 0.5-2 tokens/s
BLOCK_BOUND_MS = 500  # generous: a 2-core machine shared with the engine, the service and the load process


def cell(page: BenchmarkPage, row: int, column: str) -> str:
    return page.results_table.item(row, LEVEL_COLUMNS.index(column)).text()


def run_from_page(qtbot: QtBot, page: BenchmarkPage, levels: str, output_tokens: int, requests: int) -> None:
    page.concurrency_edit.setText(levels)
    page.prompt_spin.setValue(64)
    page.output_spin.setValue(output_tokens)
    page.requests_spin.setValue(requests)
    qtbot.waitUntil(page.run_button.isEnabled)
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.is_running, timeout=10_000)


def test_a_sweep_from_the_page_fills_the_table_lists_cards_and_compares_them(
    qtbot: QtBot, main_window: MainWindow, tmp_path: Path
) -> None:
    window, page = main_window, main_window.benchmark_page
    assert window.tabs.indexOf(page) == window.tabs.indexOf(window.dashboard_panel) + 1
    assert window.tabs.tabText(window.tabs.indexOf(page)) == "&Benchmark"
    window.tabs.setCurrentWidget(page)
    qtbot.waitUntil(lambda: page.model_combo.findText(BUNDLED_ID) >= 0)
    page.model_combo.setCurrentText(BUNDLED_ID)
    assert not page.cancel_button.isEnabled()

    # Bad levels are refused on the page, and nothing starts.
    page.concurrency_edit.setText("0,x")
    qtbot.mouseClick(page.run_button, Qt.MouseButton.LeftButton)
    assert "whole numbers from 1 to 4096" in page.status_label.text() and page.run is None

    meter = BlockMeter()
    meter.start()
    run_from_page(qtbot, page, "1,2", output_tokens=8, requests=3)
    assert page.cancel_button.isEnabled() and not page.run_button.isEnabled()
    qtbot.waitUntil(lambda: page.run is not None and page.run["state"] != "running", timeout=RUN_TIMEOUT_MS)
    meter.stop()
    print(f"\nlongest GUI-thread block while the sweep ran (model start included): {meter.longest_ms:.0f} ms")
    assert page.run is not None and page.run["state"] == "completed", page.status_label.text()
    assert meter.longest_ms < BLOCK_BOUND_MS

    assert page.results_table.rowCount() == 2
    assert [cell(page, row, "Concurrency") for row in (0, 1)] == ["1", "2"]
    assert cell(page, 0, "Gain") == "1.00x" and cell(page, 1, "Gain").endswith("x")
    assert cell(page, 0, "Errors") == "0/3" and cell(page, 1, "Errors") == "0/3"
    assert float(cell(page, 0, "Output tok/s")) > 0 and float(cell(page, 1, "TTFT p99 ms")) > 0
    throughput = page.charts.points(page.charts.throughput_curve)
    assert [x for x, _ in throughput] == [1.0, 2.0] and all(y > 0 for _, y in throughput)
    assert len(page.charts.points(page.charts.ttft_p99_curve)) == 2
    assert page.progress_bar.value() == PROGRESS_STEPS
    first_card = page.run["card_id"]
    assert first_card in page.status_label.text()
    qtbot.waitUntil(lambda: page.cards_table.rowCount() == 1)

    # A second, smaller run with a shared prefix; then the two cards side by side.
    page.mode_combo.setCurrentIndex(page.mode_combo.findData("shared-prefix"))
    page.prefix_spin.setValue(16)
    run_from_page(qtbot, page, "1", output_tokens=4, requests=2)
    assert page.run is not None and page.run["prompt_mode"] == "shared-prefix" and page.run["prefix_tokens"] == 16
    qtbot.waitUntil(lambda: page.run is not None and page.run["state"] == "completed", timeout=RUN_TIMEOUT_MS)
    second_card = page.run["card_id"]
    qtbot.waitUntil(lambda: page.cards_table.rowCount() == 2)
    assert page.results_table.rowCount() == 1
    assert "shared-prefix prompts" in page.results_label.text()
    prompts = CARD_COLUMNS.index("Prompts")
    assert [page.cards_table.item(row, prompts).text() for row in (0, 1)] == ["shared-prefix", "unique"]
    page.mode_combo.setCurrentIndex(page.mode_combo.findData("unique"))

    page.cards_table.selectRow(1)  # the older card alone: its table is shown
    qtbot.waitUntil(lambda: first_card in page.results_label.text())
    assert page.results_table.rowCount() == 2
    page.cards_table.selectAll()
    assert page.compare_button.isEnabled()
    qtbot.mouseClick(page.compare_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.compare_table.rowCount() > 0)
    table = page.compare_table
    rows = {table.item(i, 0).text(): (table.item(i, 1).text(), table.item(i, 2).text())
            for i in range(table.rowCount())}  # fmt: skip
    assert rows["card"] == (first_card, second_card)
    assert rows["c=2 output tok/s"][1] == "-" and rows["c=2 output tok/s"][0] != "-"
    window.grab().save(str(tmp_path / "benchmark_page.png"))
    assert (tmp_path / "benchmark_page.png").stat().st_size > 0

    # Cancel from the page: the run ends at once, no card is added.
    run_from_page(qtbot, page, "1,2", output_tokens=200, requests=6)
    qtbot.waitUntil(lambda: page.run is not None and page.run["phase"] == "level", timeout=RUN_TIMEOUT_MS)
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.run is not None and page.run["state"] == "cancelled", timeout=15_000)
    assert "Cancelled" in page.status_label.text() and page.run_button.isEnabled()
    qtbot.wait(500)
    assert page.cards_table.rowCount() == 2


def test_the_page_offers_the_prompt_modes_and_their_settings(qtbot: QtBot, paths: AppPaths) -> None:
    """Which settings each mode takes, on a page whose connection never opens (no run starts)."""
    page = BenchmarkPage(ServiceConnection(paths, 0))
    qtbot.addWidget(page)
    modes = [page.mode_combo.itemData(index) for index in range(page.mode_combo.count())]
    assert modes == ["unique", "shared-prefix", "multi-turn", "identical"]
    assert page.prompt_mode == "unique"  # distinct prompts unless asked otherwise
    assert "prompt cache" in page.mode_combo.itemText(modes.index("identical"))
    settings = (page.prefix_spin, page.conversations_spin, page.turns_spin, page.requests_spin)
    enabled = {}
    for mode in modes:
        page.mode_combo.setCurrentIndex(modes.index(mode))
        enabled[mode] = [widget.isEnabled() for widget in settings]
    assert enabled == {
        "unique": [False, False, False, True],
        "shared-prefix": [True, False, False, True],
        "multi-turn": [False, True, True, False],  # a level sends conversations x turns requests
        "identical": [False, False, False, True],
    }
