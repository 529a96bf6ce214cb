"""The engine log's level filter: llama.cpp's loader and slot lines hidden by default, a traceback kept whole,
every level a click away, and the view bounded."""

from __future__ import annotations

import pytest
from pytestqt.qtbot import QtBot

from app.gui.run.log_levels import levels, line_level
from app.gui.run.log_panel import MAX_LINES, LogPanel

# As llama-cpp-python's server and llama-server print them while loading and serving (shortened).
ENGINE_LINES = [
    "llama_model_loader: loaded meta data with 33 key-value pairs and 272 tensors from smollm2.gguf",
    "llama_model_loader: - kv   0:                       general.architecture str              = llama",
    "print_info: file format = GGUF V3 (latest)",
    "load_tensors:   CPU_Mapped model buffer size =    93.81 MiB",
    "llama_context: n_ctx_per_seq (2048) < n_ctx_train (8192) -- the full capacity of the model will not be used",
    "INFO:     Uvicorn running on http://127.0.0.1:41234 (Press CTRL+C to quit)",
    "slot launch_slot_: id  0 | task 0 | processing task",
    "0.01.002.003 W srv  load_model: the context is smaller than the model was trained for",
    "Traceback (most recent call last):",
    '  File "server.py", line 3, in <module>',
    "ValueError: Failed to load model from file",
]


def test_levels_read_from_the_lines() -> None:
    assert list(levels(ENGINE_LINES)) == [
        "debug", "debug", "debug", "debug", "debug", "info", "debug", "warning", "error", "error", "error",
    ]  # fmt: skip
    assert line_level("0.00.000.001 E main: exiting due to model loading error") == "error"
    assert line_level("WARNING:  Invalid HTTP request received.") == "warning"
    assert line_level("main: server is listening on http://127.0.0.1:8080") == "info"


def test_debug_lines_hidden_by_default_and_shown_on_request(qtbot: QtBot) -> None:
    panel = LogPanel()
    qtbot.addWidget(panel)
    panel.show_lines("Engine log: m", ENGINE_LINES[:4])
    for line in ENGINE_LINES[4:]:
        panel.append_line(line)
    qtbot.waitUntil(lambda: "Failed to load model" in panel.plain_text())
    shown = panel.plain_text()
    assert "llama_model_loader" not in shown and "slot launch_slot_" not in shown
    assert "Uvicorn running on" in shown and '  File "server.py"' in shown  # the traceback stays whole
    assert panel.hidden_count() == 6
    qtbot.waitUntil(lambda: panel.hidden_label.text() == "6 lines hidden")  # counted at the next batch

    panel.set_minimum_level("debug")
    assert panel.plain_text().splitlines() == ENGINE_LINES and panel.hidden_label.text() == ""
    panel.set_minimum_level("error")
    assert panel.plain_text().splitlines() == ENGINE_LINES[-3:]
    panel.set_minimum_level("warning")
    assert panel.plain_text().splitlines()[0].endswith("smaller than the model was trained for")
    with pytest.raises(ValueError, match="unknown log level 'verbose'"):
        panel.set_minimum_level("verbose")
    assert panel.minimum_level == "warning"  # the view stays as it was


def test_the_view_and_its_counts_stay_bounded(qtbot: QtBot) -> None:
    panel = LogPanel()
    qtbot.addWidget(panel)
    panel.show_lines("Engine log: m", [f"print_info: line {i}" for i in range(MAX_LINES + 100)])
    assert panel.hidden_count() == MAX_LINES and panel.plain_text() == ""
    panel.append_line("INFO:     ready")
    qtbot.waitUntil(lambda: panel.plain_text() == "INFO:     ready")
    assert panel.hidden_count() == MAX_LINES - 1  # the oldest debug line made room
