"""The setup wizard against the real service: every step, to the bundled model launched with the recommended
parameters; a screenshot of each step is written for people to look at."""

from __future__ import annotations

from pathlib import Path

import psutil
from openai import OpenAI
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QPushButton, QScrollArea, QWidget, QWizard
from pytestqt.qtbot import QtBot

from app.client import default_port
from app.gui.connection.service_connection import NOT_CONNECTED, ServiceConnection
from app.gui.shell.main_window import MainWindow
from app.gui.wizard.recommendation_page import launch_overrides
from app.gui.wizard.wizard_dialog import SetupWizardDialog
from app.gui.wizard.wizard_pages import MODEL_ID_ROLE
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.gui.conftest import API_KEY

ANSWER_TIMEOUT_MS = 30_000
READY_TIMEOUT_MS = 90_000


def _screenshot(widget: QWidget, path: Path) -> None:
    assert widget.grab().save(str(path)), f"could not write {path}"
    assert path.stat().st_size > 1000


def _next(qtbot: QtBot, wizard: QWizard) -> None:
    button = wizard.button(QWizard.WizardButton.NextButton)
    qtbot.waitUntil(button.isEnabled, timeout=ANSWER_TIMEOUT_MS)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def launch_in_view(wizard: QWizard, button: QPushButton) -> bool:
    """The button is shown inside the wizard's frame, and not in a part that scrolls."""
    parent = button.parentWidget()
    while parent is not None and parent is not wizard:
        if isinstance(parent, QScrollArea):
            return False
        parent = parent.parentWidget()
    return button.isVisible() and wizard.rect().contains(QRect(button.mapTo(wizard, QPoint(0, 0)), button.size()))


def test_the_wizard_walks_through_to_a_launched_model(qtbot: QtBot, main_window: MainWindow, tmp_path: Path) -> None:
    window = main_window
    qtbot.waitUntil(window.setup_action.isEnabled)
    window.setup_action.trigger()
    wizard = window.setup_dialog
    assert wizard is not None
    qtbot.waitUntil(wizard.isVisible)

    # Step 1: this machine, as the service sees it.
    hardware = wizard.hardware_page
    assert wizard.currentPage() is hardware
    titles = [wizard.page(page_id).title() for page_id in wizard.pageIds()]
    assert [title.split(":")[0] for title in titles] == [f"Step {n} of 4" for n in range(1, 5)]
    qtbot.waitUntil(hardware.isComplete, timeout=ANSWER_TIMEOUT_MS)
    profile = wizard.choices.hardware
    assert profile is not None
    summary = hardware.summary_label.text()
    assert f"{psutil.cpu_count()} logical cores" in summary
    assert "available of" in summary
    for problem in profile["gpu_problems"]:  # the GPU doctor's findings, each with its advice
        assert problem["backend"] in hardware.problems_label.text()
    assert not hardware.error_label.isVisible()
    _screenshot(wizard, tmp_path / "wizard-1-hardware.png")
    _next(qtbot, wizard)

    # Step 2: serve an app to three users.
    use = wizard.use_page
    assert wizard.currentPage() is use
    assert use.chat_radio.isChecked() and not use.users_spin.isEnabled()
    qtbot.mouseClick(use.serve_radio, Qt.MouseButton.LeftButton)
    assert use.users_spin.isEnabled()
    use.users_spin.setValue(3)
    assert use.users_spin.accessibleName() and use.serve_radio.accessibleName()
    _screenshot(wizard, tmp_path / "wizard-2-use.png")
    _next(qtbot, wizard)
    assert (wizard.choices.use, wizard.choices.users) == ("serve", 3)

    # Step 3: the library, the bundled model first and chosen.
    models = wizard.model_page
    qtbot.waitUntil(models.isComplete, timeout=ANSWER_TIMEOUT_MS)
    assert models.model_list.item(0).data(MODEL_ID_ROLE) == BUNDLED_ID
    assert models.selected_model_id() == BUNDLED_ID
    _screenshot(wizard, tmp_path / "wizard-3-model.png")
    _next(qtbot, wizard)

    # Step 4: the recommendation, its reasons, its memory against the free RAM, the alternatives.
    page = wizard.recommendation_page
    assert wizard.currentPage() is page
    qtbot.waitUntil(lambda: page.best is not None, timeout=ANSWER_TIMEOUT_MS)
    best = page.best
    assert best is not None
    assert best["engine"] == "llama-cpp-python"
    assert best["variant"] in page.headline_label.text()
    assert f"{best['context']} tokens" in page.plan_label.text()
    for reason in best["reasons"]:
        assert reason.split(":")[0] in page.reasons_label.text()
    ram_bar = page.memory_bar_panels[0].bar
    assert ram_bar is not None
    assert ram_bar.used == best["memory"]["ram"]
    assert [segment.label for segment in ram_bar.segments] == ["Weights", "KV cache", "Compute and runtime"]
    assert ram_bar.fits
    assert "free" in page.memory_bar_panels[0].strip.accessibleDescription()
    assert page.alternatives_table.rowCount() == 0  # one file, one variant: nothing else to offer
    # Every known engine, scored, with what it lacks here: a GGUF file is for llama.cpp only.
    engines = {
        page.engines_table.item(row, 0).text(): page.engines_table.item(row, 7).text()
        for row in range(page.engines_table.rowCount())
    }
    assert {"vLLM", "SGLang", "Text Generation Inference", "TensorRT-LLM", "DeepSpeed-MII"} <= set(engines)
    assert "needs a safetensors model (this one is gguf)" in engines["vLLM"]
    assert engines["llama.cpp (llama-cpp-python)"].startswith("installed")
    assert page.launch_button.isEnabled()
    # Launch is the default button (Done, which launches nothing, is not) and in view without scrolling, in a
    # roomy wizard and in the smallest one; the 200 % run of tests/gui/shell/test_pages.py checks it scaled.
    assert page.launch_button.isDefault() and not wizard.button(QWizard.WizardButton.FinishButton).isDefault()
    for size in (QSize(1100, 720), wizard.minimumSize()):
        wizard.resize(size)
        qtbot.waitUntil(lambda size=size: wizard.size() == size)
        assert launch_in_view(wizard, page.launch_button), size
    _screenshot(wizard, tmp_path / "wizard-4-recommendation.png")

    # Launch with Enter: the model starts with exactly the recommended parameters and reaches ready.
    qtbot.keyClick(page, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.launch_status_label.text().startswith("Ready"), timeout=READY_TIMEOUT_MS)
    assert not page.error_label.isVisible()
    assert window.item_model.state_of(BUNDLED_ID) == "ready"
    overrides = launch_overrides(best)
    plan = {**overrides, "parallel": 1, "draft": None, "lookup": 0}  # llama-cpp-python serves one request at a time
    qtbot.waitUntil(lambda: (window.item_model.record(BUNDLED_ID) or {}).get("plan") == plan, timeout=5000)
    record = window.item_model.record(BUNDLED_ID)
    assert record is not None
    argv = psutil.Process(record["pid"]).cmdline()
    assert argv[argv.index("--n_ctx") + 1] == str(best["context"])
    # ... and keeps them as the model's load settings, for every later start (app.service.launch.model_settings).
    client = window.connection.client
    assert client is not None
    assert {k: v for k, v in client.model_settings(BUNDLED_ID)["settings"].items() if v is not None} == overrides
    _screenshot(wizard, tmp_path / "wizard-5-launched.png")

    qtbot.mouseClick(wizard.button(QWizard.WizardButton.FinishButton), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not wizard.isVisible())
    assert window.model_list_panel.selected_model_id() == BUNDLED_ID

    # Opened again, it starts over from the first step.
    window.setup_action.trigger()
    qtbot.waitUntil(wizard.isVisible)
    assert wizard.currentPage() is wizard.hardware_page
    wizard.reject()


def test_without_a_service_the_wizard_says_so_in_words(qtbot: QtBot, paths: AppPaths) -> None:
    connection = ServiceConnection(paths, default_port())  # never opened
    wizard = SetupWizardDialog(connection)
    qtbot.addWidget(wizard)
    wizard.show()
    page = wizard.hardware_page
    qtbot.waitUntil(page.error_label.isVisible)
    assert page.error_label.text() == f"Could not read this machine's hardware: {NOT_CONNECTED}"
    assert not page.isComplete()
    assert not wizard.button(QWizard.WizardButton.NextButton).isEnabled()
    assert "Traceback" not in page.error_label.text()
    wizard.reject()


def test_launch_restarts_a_model_running_with_other_settings(
    qtbot: QtBot, main_window: MainWindow, endpoint_port: int
) -> None:
    window, models = main_window, main_window.item_model
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "stopped", timeout=ANSWER_TIMEOUT_MS)
    window.connection.start_model(BUNDLED_ID)  # the default plan, as the Launch button of the list starts it
    qtbot.waitUntil(lambda: models.state_of(BUNDLED_ID) == "ready", timeout=READY_TIMEOUT_MS)
    qtbot.waitUntil(lambda: ((models.record(BUNDLED_ID) or {}).get("plan") or {}).get("context") == 4096)
    first_pid = (models.record(BUNDLED_ID) or {})["pid"]
    # Three streamed answers measured here (decode speed is measured on streams): the wizard's speed is
    # theirs, and says so.
    client = OpenAI(base_url=f"http://127.0.0.1:{endpoint_port}/v1", api_key=API_KEY, max_retries=0)
    for n in range(3):
        stream = client.chat.completions.create(
            model=BUNDLED_ID, messages=[{"role": "user", "content": f"Count to {n + 9}."}], max_tokens=16,
            logit_bias={"0": -100, "2": -100}, stream=True,
        )  # fmt: skip
        assert sum(1 for chunk in stream if chunk.choices and chunk.choices[0].delta.content) > 2

    window.setup_action.trigger()
    wizard = window.setup_dialog
    assert wizard is not None
    _next(qtbot, wizard)  # hardware
    _next(qtbot, wizard)  # chat
    _next(qtbot, wizard)  # the bundled model
    page = wizard.recommendation_page
    qtbot.waitUntil(page.launch_button.isEnabled, timeout=ANSWER_TIMEOUT_MS)
    best = page.best
    assert best is not None and best["context"] != 4096
    assert "running with other settings: Launch restarts it" in page.launch_status_label.text()
    qtbot.waitUntil(lambda: page.measured is not None, timeout=ANSWER_TIMEOUT_MS)
    assert "measured here (the median of 3 earlier requests of this model)" in page.plan_label.text()

    qtbot.mouseClick(page.launch_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.launch_status_label.text().startswith("Ready"), timeout=READY_TIMEOUT_MS)
    overrides = launch_overrides(best)
    plan = {**overrides, "parallel": 1, "draft": None, "lookup": 0}
    qtbot.waitUntil(lambda: (models.record(BUNDLED_ID) or {}).get("plan") == plan, timeout=5000)
    assert (models.record(BUNDLED_ID) or {})["pid"] != first_pid
    wizard.reject()
