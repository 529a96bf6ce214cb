"""`modeldeck` without a display: a clear hint and exit code 2, without creating a QApplication."""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.gui.shell import launch
from app.gui.shell.main_window import MainWindow
from app.paths import AppPaths
from app.settings import LoadedSettings, Settings, load_settings, settings_file


def test_run_gui_without_display_prints_the_headless_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], paths: AppPaths
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")

    def no_application(*_args: object) -> None:
        raise AssertionError("run_gui created a QApplication without a display")

    monkeypatch.setattr(launch, "QApplication", no_application)

    assert launch.run_gui(paths, LoadedSettings(Settings())) == 2
    err = capsys.readouterr().err
    assert "no display" in err
    assert "modeldeck serve" in err
    assert "installers/run.sh serve" in err


@pytest.mark.parametrize(
    ("environ", "platform", "expected"),
    [
        ({}, "linux", False),
        ({"DISPLAY": ":0"}, "linux", True),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", True),
        ({"QT_QPA_PLATFORM": "offscreen"}, "linux", True),
        ({"DISPLAY": ""}, "linux", False),
        ({}, "darwin", True),
        ({}, "win32", True),
    ],
)
def test_has_display(environ: dict[str, str], platform: str, expected: bool) -> None:
    assert launch.has_display(environ, platform) is expected


def test_a_settings_file_set_aside_at_start_is_said_in_the_window(
    qtbot: QtBot, paths: AppPaths, endpoint_port: int
) -> None:
    """The command reads the settings first and sets a bad file aside; the window, opened after, says so (it is
    gone from disk by then: the service it starts cannot see it to report it)."""
    settings_file(paths).parent.mkdir(parents=True)
    settings_file(paths).write_text('{"theme": "dark",}', encoding="utf-8")
    loaded = load_settings(paths)
    seen: list[str] = []

    def look_then_quit() -> None:
        window = next(w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow))
        qtbot.addWidget(window)  # deleted after the test
        seen.append(window.statusBar().currentMessage())
        window.quit_without_asking()

    QTimer.singleShot(0, look_then_quit)
    assert launch.run_gui(paths, loaded) == 0
    assert len(seen) == 1 and seen[0].startswith("Settings: ") and "kept it as settings.json.bad" in seen[0]
