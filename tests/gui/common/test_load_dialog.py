"""The Load dialog against the real service on the bundled model, from the Models page and the chat's picker: the
saved settings with the memory the planner predicts for them against what is free, a new value re-estimated, and
"Save and load" keeping the settings and starting the model with them; the picker's Load."""

from __future__ import annotations

from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, Qt
from pytestqt.qtbot import QtBot

from app.api_types import ModelSettingsRecord
from app.gui.common.load_dialog import LoadDialog
from app.gui.connection.service_connection import ServiceConnection
from app.gui.shell.main_window import MainWindow
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.held_answer import HeldAnswer

READY_TIMEOUT_MS = 90_000


# The defaults of a model trained on 8192 tokens on llama-server: a default context for each of 4 slots, sharing
# `-c`, each slot bounded by the trained context (as /api/models/ID/settings answers them).
SERVER_DEFAULTS: ModelSettingsRecord = {
    "model_id": "m",
    "settings": {},
    "plan": {"context": 16384, "gpu_layers": 0, "threads": 2, "batch": 512, "parallel": 4, "engine": "llama-server"},
    "memory": {"ram_bytes": 300 << 20, "vram_bytes": 0, "total_bytes": 300 << 20},
    "bounds": {"context": [256, 32768], "gpu_layers": [0, 1000], "threads": [1, 2], "batch": [32, 4096],
               "parallel": [1, 64], "engine": ["llama-cpp-python", "llama-server"]},
    "free": {"ram_bytes": 8 << 30, "gpu_bytes": None},
    "saved": False,
    "draft_reason": None,
    "drafts": ["tiny"],
}  # fmt: skip


def _needs(dialog: LoadDialog) -> str:
    return dialog.memory_label.text()


def test_load_settings_are_shown_estimated_saved_and_used(
    qtbot: QtBot, main_window: MainWindow, tmp_path: Path
) -> None:
    window, library = main_window, main_window.library_page
    window.tabs.setCurrentWidget(library)
    qtbot.waitUntil(lambda: library.model(BUNDLED_ID) is not None, timeout=30_000)
    library.select(BUNDLED_ID)
    qtbot.waitUntil(library.load_settings_button.isEnabled)
    qtbot.mouseClick(library.load_settings_button, Qt.MouseButton.LeftButton)
    dialog = library.load_dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: dialog.answer is not None, timeout=30_000)
    assert dialog.status_label.text().startswith("The defaults")
    assert _needs(dialog).startswith("Needs about") and "RAM free" in _needs(dialog)
    default_context = dialog.spins["context"].value()
    assert default_context >= 1024
    before = _needs(dialog)
    dialog.spins["context"].setValue(512)
    qtbot.waitUntil(lambda: _needs(dialog) != before, timeout=30_000)  # the planner's estimate for 512 tokens
    dialog.grab().save(str(tmp_path / "load-dialog.png"))

    qtbot.mouseClick(dialog.load_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.status_label.text().startswith("Saved"), timeout=30_000)
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    client = window.connection.client
    assert client is not None
    record = next(m for m in client.models() if m["id"] == BUNDLED_ID)
    assert record["plan"]["context"] == 512
    assert client.model_settings(BUNDLED_ID)["settings"]["context"] == 512
    dialog.reject()

    # The chat's picker opens the same dialog, showing what was saved; "Use defaults" forgets it.
    chat = window.chat_page
    window.tabs.setCurrentWidget(chat)
    qtbot.waitUntil(lambda: chat.picker.has_model(BUNDLED_ID))
    chat.picker.select_model(BUNDLED_ID)
    assert "(running," in chat.model_combo.currentText()
    qtbot.mouseClick(chat.picker.settings_button, Qt.MouseButton.LeftButton)
    picked = chat.picker.dialog
    assert picked is not None
    qtbot.waitUntil(lambda: picked.answer is not None, timeout=30_000)
    assert picked.spins["context"].value() == 512 and picked.status_label.text() == "Saved settings."
    qtbot.mouseClick(picked.defaults_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: picked.status_label.text() == "Saved.", timeout=30_000)
    assert picked.spins["context"].value() == default_context
    assert client.model_settings(BUNDLED_ID)["saved"] is False
    picked.reject()

    # The picker's Load starts a stopped model, showing it loading until it is ready.
    client.stop_model(BUNDLED_ID)
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "stopped", timeout=30_000)
    qtbot.waitUntil(chat.picker.load_button.isEnabled)
    lines: list[str] = []
    chat.picker.sig_state_changed.connect(lambda: lines.append(chat.model_combo.currentText()))
    qtbot.mouseClick(chat.picker.load_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.item_model.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    assert any("(loading\N{HORIZONTAL ELLIPSIS}" in line for line in lines), lines
    assert next(m for m in client.models() if m["id"] == BUNDLED_ID)["plan"]["context"] == default_context


def test_the_context_shown_is_the_slots_total_and_follows_them(qtbot: QtBot, paths: AppPaths) -> None:
    """No service: the dialog is filled with an answer as the route gives it (a connection that is not connected
    refuses the dialog's own question at once)."""
    dialog = LoadDialog(ServiceConnection(paths), "m", "stopped")
    qtbot.addWidget(dialog)
    dialog._on_answer(SERVER_DEFAULTS)
    context = dialog.spins["context"]
    assert context.value() == 16384 and context.maximum() == 32768  # the total, not clamped to one slot's
    dialog.spins["parallel"].setValue(8)
    assert context.value() == 32768  # each slot keeps its 4096 tokens
    dialog.spins["parallel"].setValue(2)
    assert context.value() == 8192 and context.maximum() == 16384
    context.setValue(6000)  # a person's choice: 3000 a slot from now on
    dialog.spins["parallel"].setValue(4)
    assert context.value() == 12000
    dialog.engine_combo.setCurrentText("llama-cpp-python")  # one request at a time: one slot's context
    assert context.value() == 3000 and context.maximum() == 8192
    assert dialog.values()["context"] == 3000 and "parallel" not in dialog.values()


def test_speculative_decoding_is_offered_for_the_engine_that_does_it(qtbot: QtBot, paths: AppPaths) -> None:
    """No service: llama-server offers the models that could draft (the route's `drafts`), llama-cpp-python prompt
    lookup instead, and the settings sent carry only the one the engine takes."""
    dialog = LoadDialog(ServiceConnection(paths), "m", "stopped")
    qtbot.addWidget(dialog)
    drafting = {**SERVER_DEFAULTS, "plan": {**SERVER_DEFAULTS["plan"], "draft": "tiny", "lookup": 0},
                "draft_reason": "draft tiny for m: same vocabulary, +140 MB"}  # fmt: skip
    dialog._on_answer(drafting)  # type: ignore[arg-type]
    assert [dialog.draft_combo.itemText(i) for i in range(dialog.draft_combo.count())] == ["None", "tiny"]
    assert dialog.draft_combo.currentText() == "tiny" and dialog.draft_combo.isEnabled()
    assert not dialog.lookup_spin.isEnabled() and dialog.draft_label.text().startswith("draft tiny for m")
    assert dialog.values()["draft"] == "tiny" and "lookup" not in dialog.values()
    dialog.draft_combo.setCurrentText("None")
    assert "draft" not in dialog.values()
    dialog.engine_combo.setCurrentText("llama-cpp-python")
    assert dialog.lookup_spin.isEnabled() and not dialog.draft_combo.isEnabled()
    dialog.lookup_spin.setValue(6)
    assert dialog.values()["lookup"] == 6 and "draft" not in dialog.values()


def test_a_save_right_after_an_edit_is_answered(
    qtbot: QtBot, main_window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit waits ESTIMATE_DELAY_MS before the planner is asked; Enter in a field presses the default button at
    once. The save's answer, held until that delay has passed, is still what the dialog shows: it is saved, and
    its buttons work again. The fields cannot be edited while the save is in flight."""
    window, library = main_window, main_window.library_page
    window.tabs.setCurrentWidget(library)
    qtbot.waitUntil(lambda: library.model(BUNDLED_ID) is not None, timeout=30_000)
    library.select(BUNDLED_ID)
    qtbot.waitUntil(library.load_settings_button.isEnabled)
    qtbot.mouseClick(library.load_settings_button, Qt.MouseButton.LeftButton)
    dialog = library.load_dialog
    assert dialog is not None
    qtbot.waitUntil(lambda: dialog.answer is not None, timeout=30_000)
    held = HeldAnswer(monkeypatch, window.connection, "save_model_settings")
    dialog.spins["context"].setValue(768)
    qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    assert not dialog.spins["context"].isEnabled() and not dialog.engine_combo.isEnabled()
    qtbot.waitUntil(held.answered.is_set, timeout=30_000)
    qtbot.waitUntil(lambda: not dialog._estimate_timer.isActive(), timeout=5_000)  # a pending estimate has gone out
    with qtbot.waitSignal(dialog.sig_saved, timeout=30_000):
        held.deliver(qtbot)
    assert dialog.status_label.text() == "Saved." and dialog.save_button.isEnabled()
    assert dialog.spins["context"].value() == 768 and dialog.spins["context"].isEnabled()
    client = window.connection.client
    assert client is not None and client.model_settings(BUNDLED_ID)["settings"]["context"] == 768
    dialog.reject()


def test_a_dialog_replaced_before_its_answer_ignores_it(
    qtbot: QtBot, main_window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Load settings pressed again while the first dialog's settings are on their way: the first dialog is closed
    and deleted, and its answer, arriving after that, is dropped instead of reaching widgets that are gone."""
    window, library = main_window, main_window.library_page
    window.tabs.setCurrentWidget(library)
    qtbot.waitUntil(lambda: library.model(BUNDLED_ID) is not None, timeout=30_000)
    library.select(BUNDLED_ID)
    qtbot.waitUntil(library.load_settings_button.isEnabled)
    held = HeldAnswer(monkeypatch, window.connection, "model_settings")
    qtbot.mouseClick(library.load_settings_button, Qt.MouseButton.LeftButton)
    first = library.load_dialog
    assert first is not None
    qtbot.waitUntil(held.answered.is_set, timeout=30_000)
    qtbot.mouseClick(library.load_settings_button, Qt.MouseButton.LeftButton)
    second = library.load_dialog
    assert second is not None and second is not first
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not shiboken6.isValid(first)
    held.deliver(qtbot)
    qtbot.waitUntil(lambda: second.answer is not None, timeout=30_000)
    second.reject()
