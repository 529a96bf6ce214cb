"""`modeldeck` without a display: a clear hint and exit code 2, without creating a QApplication."""

from __future__ import annotations

import sys

import pytest

from app.gui import launch
from app.paths import AppPaths


def test_run_gui_without_display_prints_the_headless_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], paths: AppPaths
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")

    def no_application(*_args: object) -> None:
        raise AssertionError("run_gui created a QApplication without a display")

    monkeypatch.setattr(launch, "QApplication", no_application)

    assert launch.run_gui(paths) == 2
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
