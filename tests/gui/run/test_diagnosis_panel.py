"""A failed engine's diagnosis on the Run page, and the relaunch with a smaller context against the real service.

The out-of-memory record is built in the shape the control API documents (GET /api/models: `diagnosis` {kind,
summary, advice} and `plan` {context, gpu_layers, threads, batch}); the bundled model does not run out of memory
on demand on this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.run.diagnosis_panel import DiagnosisPanel, smaller_context
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID

READY_TIMEOUT_MS = 60_000
OUT_OF_MEMORY = {
    "kind": "out_of_memory",
    "summary": "The engine ran out of memory while loading the model.",
    "advice": "Try a smaller context, fewer GPU layers or a smaller quantization.",
}


def test_smaller_context_halves_the_plan_down_to_a_floor() -> None:
    assert smaller_context({"plan": {"context": 8192}}) == 4096
    assert smaller_context({"plan": {"context": 300}}) == 256
    assert smaller_context({"plan": {"context": 256}}) is None
    assert smaller_context({"plan": None}) is None


def test_panel_words_each_kind_and_hides_for_a_healthy_model(qtbot: QtBot) -> None:
    panel = DiagnosisPanel()
    qtbot.addWidget(panel)
    panel.show()
    corrupt = {"kind": "corrupt_file", "summary": "The model file is damaged.", "advice": "Download it again."}
    panel.show_record({"id": "m", "state": "failed", "diagnosis": corrupt, "plan": {"context": 4096}})
    assert panel.isVisible()
    assert "damaged" in panel.summary_label.text() and "again" in panel.advice_label.text()
    assert not panel.relaunch_button.isVisible()  # a smaller context does not mend a damaged file
    panel.show_record({"id": "m", "state": "ready", "diagnosis": None, "plan": {"context": 4096}})
    assert not panel.isVisible()


def test_out_of_memory_relaunches_with_half_the_context(qtbot: QtBot, main_window: MainWindow, tmp_path: Path) -> None:
    window, models, panel = main_window, main_window.item_model, main_window.diagnosis_panel
    window.tabs.setCurrentWidget(window.run_page)  # the diagnosis is shown on the Run page
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped")
    record = dict(models.record(BUNDLED_ID) or {})
    record.update(state="failed", diagnosis=OUT_OF_MEMORY, plan={"context": 1024, "gpu_layers": 0, "threads": 2})
    models.set_models([record])
    window.model_list_panel.select_model(BUNDLED_ID)
    qtbot.waitUntil(panel.isVisible)
    assert "ran out of memory" in panel.summary_label.text()
    assert "smaller context" in panel.advice_label.text()
    assert panel.relaunch_button.isVisible() and "512" in panel.relaunch_button.text()
    window.grab().save(str(tmp_path / "run_page_diagnosis.png"))

    qtbot.mouseClick(panel.relaunch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    listed: list[list[dict[str, Any]]] = []
    window.connection.call(lambda client: client.models(), listed.append, lambda message: None)
    qtbot.waitUntil(lambda: bool(listed))
    served = next(model for model in listed[0] if model["id"] == BUNDLED_ID)
    assert served["plan"]["context"] == 512
    assert not panel.isVisible()
