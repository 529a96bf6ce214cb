"""The wizard's "Build llama-server" button against the real service: serving three users, the bundled model's plan is
llama-cpp-python's while llama-server is missing, and the button builds it with the service (a real cmake build of the
tiny llama-server project of tests/app/installs/test_llama_server_build.py, named by $MODELDECK_LLAMA_SERVER_SDIST),
showing the step and percent; the plan is asked again and Launch then uses llama-server. A Cancel stops the build and
leaves no process; a failure is said in one line."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWizard
from pytestqt.qtbot import QtBot

from app.api_types import EngineBuildRecord
from app.gui.shell.main_window import MainWindow
from app.gui.wizard.engine_build_panel import engine_to_build, one_line
from app.gui.wizard.recommendation_page import RecommendationPage, launch_overrides
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.service.jobs.engine_builds import SDIST_ENV
from engines.llama_server import installed_builds
from tests.app.installs.test_llama_server_build import sdist_of, tiny_project
from tests.app.service.jobs.test_engine_build_service import SLOW_STEP
from tests.support.held_answer import HeldAnswer

ANSWER_TIMEOUT_MS = 30_000
BUILD_TIMEOUT_MS = 300_000


@pytest.fixture
def sdist_kind() -> str:
    """Which sdist the service builds from (a test parametrizes it): "tiny", "slow" (a 120 s step), "missing"."""
    return "tiny"


@pytest.fixture
def sdist_env(sdist_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if sdist_kind == "missing":
        sdist = tmp_path / "no-such-sdist.tar.gz"
    else:
        extra = SLOW_STEP if sdist_kind == "slow" else ""
        sdist = sdist_of(tiny_project(tmp_path / "project", extra=extra), tmp_path)
    monkeypatch.setenv(SDIST_ENV, str(sdist))
    return sdist


@pytest.fixture
def endpoint_port(endpoint_port: int, sdist_env: Path) -> int:
    """The GUI fixtures' port, set up after the sdist: the service the window starts inherits the variable."""
    return endpoint_port


def _next(qtbot: QtBot, wizard: QWizard) -> None:
    button = wizard.button(QWizard.WizardButton.NextButton)
    qtbot.waitUntil(button.isEnabled, timeout=ANSWER_TIMEOUT_MS)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def recommendation_for_three_users(qtbot: QtBot, window: MainWindow) -> RecommendationPage:
    window.setup_action.trigger()
    wizard = window.setup_dialog
    assert wizard is not None
    qtbot.waitUntil(wizard.isVisible)
    _next(qtbot, wizard)  # hardware
    qtbot.mouseClick(wizard.use_page.serve_radio, Qt.MouseButton.LeftButton)
    wizard.use_page.users_spin.setValue(3)
    _next(qtbot, wizard)  # serve three users
    qtbot.waitUntil(lambda: wizard.model_page.selected_model_id() == BUNDLED_ID, timeout=ANSWER_TIMEOUT_MS)
    _next(qtbot, wizard)  # the bundled model
    page = wizard.recommendation_page
    qtbot.waitUntil(lambda: page.best is not None, timeout=ANSWER_TIMEOUT_MS)
    return page


def service_children(window: MainWindow) -> list[str]:
    process = window.connection.service_process
    assert process is not None, "the window started the service"
    names = []
    for child in psutil.Process(process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a step that just ended may be gone
            names.append(" ".join(child.cmdline()))
    return names


def test_the_button_builds_llama_server_and_launch_then_uses_it(
    qtbot: QtBot, main_window: MainWindow, paths: AppPaths
) -> None:
    window = main_window
    client = window.connection.client
    assert client is not None
    # One user: llama-cpp-python serves as well, and no build is offered (the service's own scores say so).
    assert engine_to_build(client.recommend(BUNDLED_ID, "chat")) is None

    page = recommendation_for_three_users(qtbot, window)
    panel = page.engine_build_panel
    assert page.best is not None and page.best["engine"] == "llama-cpp-python"
    qtbot.waitUntil(panel.isVisible)
    assert panel.build_button.text() == "Build llama-server" and panel.build_button.isEnabled()
    assert "would serve this better" in panel.intro_label.text()
    assert not panel.progress_bar.isVisible() and not panel.cancel_button.isVisible()

    records: list[EngineBuildRecord] = []
    shown: list[int] = []
    window.connection.sig_engine_build_changed.connect(records.append)
    panel.progress_bar.valueChanged.connect(shown.append)
    qtbot.mouseClick(panel.build_button, Qt.MouseButton.LeftButton)
    assert not panel.build_button.isEnabled()
    qtbot.waitUntil(lambda: page.best is not None and page.best["engine"] == "llama-server", timeout=BUILD_TIMEOUT_MS)

    assert records[-1]["state"] == "completed", records[-1]
    assert [b.executable for b in installed_builds(paths.engine_builds)] == [Path(str(records[-1]["executable"]))]
    assert shown and shown == sorted(shown) and shown[-1] == 100, "the bar followed the build's percent"
    assert {"configuring", "compiling"} <= {r["step"] for r in records}
    assert panel.intro_label.text().startswith("Built llama-server 9.9.9")
    assert not panel.build_button.isVisible() and not panel.error_label.isVisible()
    # The plan was asked again: llama-server's slots for the three users, and Launch names it.
    qtbot.waitUntil(page.launch_button.isEnabled, timeout=ANSWER_TIMEOUT_MS)
    best = page.best
    assert launch_overrides(best)["engine"] == "llama-server"
    assert "llama-server" in page.headline_label.text() or "llama.cpp server" in page.headline_label.text()
    page.wizard().reject()


@pytest.mark.parametrize("sdist_kind", ["slow"])
def test_cancel_stops_the_build_and_the_button_comes_back(
    qtbot: QtBot, main_window: MainWindow, paths: AppPaths
) -> None:
    page = recommendation_for_three_users(qtbot, main_window)
    panel = page.engine_build_panel
    qtbot.waitUntil(panel.build_button.isEnabled, timeout=ANSWER_TIMEOUT_MS)
    qtbot.mouseClick(panel.build_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: any("sleep" in name for name in service_children(main_window)), timeout=BUILD_TIMEOUT_MS)
    qtbot.waitUntil(panel.cancel_button.isVisible, timeout=ANSWER_TIMEOUT_MS)
    assert panel.progress_bar.isVisible() and "%" in panel.step_label.text()
    qtbot.mouseClick(panel.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.step_label.text() == "The build was cancelled.", timeout=ANSWER_TIMEOUT_MS)
    assert panel.build_button.isEnabled() and not panel.cancel_button.isVisible()
    assert service_children(main_window) == [], "cmake, make and the step went with the cancel"
    assert installed_builds(paths.engine_builds) == []
    assert page.best is not None and page.best["engine"] == "llama-cpp-python"
    page.wizard().reject()


@pytest.mark.parametrize("sdist_kind", ["missing"])
def test_a_failed_build_is_said_in_one_line(qtbot: QtBot, main_window: MainWindow, sdist_env: Path) -> None:
    page = recommendation_for_three_users(qtbot, main_window)
    panel = page.engine_build_panel
    qtbot.waitUntil(panel.build_button.isEnabled, timeout=ANSWER_TIMEOUT_MS)
    qtbot.mouseClick(panel.build_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(panel.error_label.isVisible, timeout=BUILD_TIMEOUT_MS)
    text = panel.error_label.text()
    assert text.startswith("The build failed: ") and f"{sdist_env}, which is not a file" in text
    assert "\n" not in text
    assert panel.build_button.isEnabled(), "it can be tried again"
    page.wizard().reject()


def test_a_compiler_error_is_one_line_with_the_error_in_it() -> None:
    error = (
        "`cmake --build` failed (exit 2):\nmain.c:1:24: error: 'undeclared_thing' undeclared\n"
        "make: *** [all] Error 2\nFull log: /tmp/x.log"
    )
    assert one_line(error) == "`cmake --build` failed (exit 2): main.c:1:24: error: 'undeclared_thing' undeclared"


@pytest.mark.parametrize("sdist_kind", ["missing"])
def test_a_build_that_ends_before_its_start_is_answered_shows_its_end(
    qtbot: QtBot, main_window: MainWindow, sdist_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's answer (the build running) held back until the build's failure has come on the event stream:
    the order a loaded machine produced. The panel keeps showing the end, not a build that runs forever."""
    page = recommendation_for_three_users(qtbot, main_window)
    panel, connection = page.engine_build_panel, main_window.connection
    records: list[EngineBuildRecord] = []
    connection.sig_engine_build_changed.connect(records.append)
    held = HeldAnswer(monkeypatch, connection, "start_engine_build")
    qtbot.waitUntil(panel.build_button.isEnabled, timeout=ANSWER_TIMEOUT_MS)
    qtbot.mouseClick(panel.build_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: held.answered.is_set() and any(r["state"] == "failed" for r in records))
    held.deliver(qtbot)
    assert panel.error_label.isVisible() and panel.error_label.text().startswith("The build failed: ")
    assert panel.build_button.isEnabled(), "it can be tried again"
    assert not panel.progress_bar.isVisible() and not panel.cancel_button.isVisible()
    page.wizard().reject()
