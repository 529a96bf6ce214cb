"""Quality cards on the Benchmark page, beside the benchmark cards, against the real service: two saved cards
(written by the quality card code, as `modeldeck quality` writes them) are listed with their figures, and two
selected are compared side by side; a bad start is refused with the service's reason. The measurement itself is
tested end to end in tests/app/quality/ and tests/app/service/jobs/test_quality_service.py."""

from __future__ import annotations

from dataclasses import asdict

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.api_types import BenchState, QualityRunRecord
from app.gui.shell.main_window import MainWindow
from app.paths import AppPaths
from app.quality.card import QualityCard, quality_dir
from app.quality.measure import VariantResult


def saved_card(paths: AppPaths, card_id: str, text: str, q4_ratio: float) -> None:
    results = [
        VariantResult("m.q8_0", "Q8_0", 2, True, 10.0, 0.1, 1.0, 0.0, 0.0, 0.0, 1.0, 1.5, 2**27),
        VariantResult("m.q4_0", "Q4_0", 1, False, 10 * q4_ratio, 0.1, q4_ratio, 0.05, 0.3, 1.2, 0.9, 1.2, 2**26),
    ]
    card = QualityCard(card_id, "2026-12-04T18:00:00+00:00", "0.1.0", "m", "m.q8_0", {}, {"id": "hw"},
                       {"kind": "user", "description": text, "path": "/x", "chars": 10, "sha256": "0" * 64,
                        "tokens": 254, "n_ctx": 256, "chunks": 2}, results)  # fmt: skip
    card.save(quality_dir(paths))


def test_quality_cards_are_listed_and_compared_beside_the_benchmark_cards(
    qtbot: QtBot, main_window: MainWindow, paths: AppPaths
) -> None:
    saved_card(paths, "20261204T180000-quality-m", "the user's text a.txt", 1.05)
    saved_card(paths, "20261204T180100-quality-m", "the user's text b.txt", 1.10)
    page = main_window.benchmark_page
    panel = page.quality_panel
    main_window.tabs.setCurrentWidget(page)
    qtbot.waitUntil(lambda: panel.cards_table.rowCount() == 2, timeout=30_000)
    newest = panel.cards_table.item(0, 4).text()
    assert "Q4_0: +10.00 %" in newest and "90.0 %" in newest and "b.txt" in panel.cards_table.item(0, 3).text()
    assert not panel.compare_button.isEnabled()
    panel.cards_table.selectAll()
    assert panel.compare_button.isEnabled()
    qtbot.mouseClick(panel.compare_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.compare_table.rowCount() > 5, timeout=30_000)
    rows = {panel.compare_table.item(r, 0).text(): (panel.compare_table.item(r, 1).text(),
            panel.compare_table.item(r, 2).text()) for r in range(panel.compare_table.rowCount())}  # fmt: skip
    assert rows["text"] == ("the user's text a.txt", "the user's text b.txt"), "the older card is A"
    assert rows["m.q4_0 PPL vs ref %"] == ("5.0000", "10.0000")

    # A model the service does not know: the service's reason is shown, and nothing runs.
    panel.model_combo.addItem("no-such-model")
    panel.model_combo.setCurrentText("no-such-model")
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Unknown model" in panel.status_label.text(), timeout=30_000)
    assert panel.run is None and panel.run_button.isEnabled()


def run_record(run_id: str, state: BenchState, fraction: float) -> QualityRunRecord:
    return QualityRunRecord(
        id=run_id, state=state, model="m", variants=["m.q8_0"], reference=None, data=None,
        tokens=4096, step=0, steps=1, variant="m.q8_0", chunk=1, chunks=4, fraction=fraction, results=[],
        card_id=None, error="the engine stopped" if state == "failed" else None, started=0.0,
        finished=None if state == "running" else 1.0,
    )  # fmt: skip


def test_a_run_that_ended_is_not_shown_running_again_by_an_older_answer(main_window: MainWindow) -> None:
    """The start's answer (the run at its start) can reach the panel after the run's end came as an event. The
    records are given to the panel as the connection hands them over (no quality run is started)."""
    panel = main_window.benchmark_page.quality_panel
    panel.show_run(run_record("r1", "running", 0.5))
    assert not panel.run_button.isEnabled() and panel.cancel_button.isEnabled()
    panel.show_run(run_record("r1", "running", 0.25))  # older: dropped
    assert panel.run is not None and panel.run["fraction"] == 0.5
    panel.show_run(run_record("r1", "failed", 0.5))
    panel.show_run(run_record("r1", "running", 0.0))  # the start's answer, late
    assert panel.status_label.text() == "Failed: the engine stopped"
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
    panel.show_run(run_record("r2", "running", 0.0))  # a new run is shown from its start
    assert panel.status_label.text().startswith("Measuring m") and not panel.run_button.isEnabled()


def test_a_run_whose_card_could_not_be_saved_keeps_its_figures_and_says_why(main_window: MainWindow) -> None:
    """The service keeps what a run measured in the run (tests/app/service/jobs/test_quality_service.py), but no
    card lists it when the card could not be saved: the panel shows the run's own figures beside the reason."""
    panel = main_window.benchmark_page.quality_panel
    reference = VariantResult("m.q8_0", "Q8_0", 2, True, 10.0, 0.1, 1.0, 0.0, 0.0, 0.0, 1.0, 1.5, 2**27)
    q4 = VariantResult("m.q4_0", "Q4_0", 1, False, 10.5, 0.1, 1.05, 0.05, 0.3, 1.2, 0.9, 1.2, 2**26)
    running = run_record("r1", "running", 0.5)
    running["results"] = [asdict(reference)]  # as the service carries them: each variant's event
    panel.show_run(running)
    assert panel.results_label.text() == ""
    failed = run_record("r1", "failed", 0.5)
    failed["results"] = [asdict(reference), asdict(q4)]
    failed["error"] = "modeldeck: the quality run ended, but could not save the card c1 in /d/quality: File exists"
    panel.show_run(failed)
    assert panel.status_label.text() == f"Failed: {failed['error']}"
    assert panel.results_label.text().endswith(": Q4_0: +5.00 %, 0.0500, 90.0 %")
    panel.show_run(run_record("r2", "running", 0.0))  # a new run starts with none of the old one's figures
    assert panel.results_label.text() == ""
