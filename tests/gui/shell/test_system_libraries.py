"""`modeldeck` on an X11 desktop that lacks a library Qt's xcb plugin loads: one sentence naming the package to
install and exit code 3, never Qt's plugin dump.

A library cannot be uninstalled for a test, so the plugin is stood in for by a real ELF shared object, compiled
here against a stub library that is then deleted: `ldd` reports it "not found" exactly as it does for Qt's plugin
on a machine without libxcb-icccm4.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.gui.shell import launch, system_libraries
from app.gui.shell.system_libraries import check_plugin, debian_package, missing_libraries, missing_message, uses_xcb
from app.paths import AppPaths
from app.settings import LoadedSettings, Settings

LDD_OUTPUT = """\tlinux-vdso.so.1 (0x00007ffd)
\tlibQt6XcbQpa.so.6 => /opt/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f1)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)
"""


def elf_needing_an_absent_library(directory: Path) -> Path:
    """A shared object whose DT_NEEDED names libmodeldeckabsent.so.1, which no longer exists."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler is needed to make the test's ELF (the engine builds need one too)"
    (directory / "stub.c").write_text("int absent_symbol(void) { return 1; }\n")
    (directory / "plugin.c").write_text("int absent_symbol(void);\nint plugin(void) { return absent_symbol(); }\n")
    stub = directory / "libmodeldeckabsent.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-Wl,-soname,libmodeldeckabsent.so.1", "-o", str(stub),
                    str(directory / "stub.c")], check=True)  # fmt: skip
    (directory / "libmodeldeckabsent.so").symlink_to(stub.name)
    plugin = directory / "libqxcb.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(plugin), str(directory / "plugin.c"),
                    f"-L{directory}", "-lmodeldeckabsent"], check=True)  # fmt: skip
    stub.unlink()
    return plugin


def test_missing_libraries_are_read_from_ldd_once_each_in_order() -> None:
    assert missing_libraries(LDD_OUTPUT) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert missing_libraries("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n") == []


@pytest.mark.parametrize(
    ("soname", "package"),
    [
        ("libxcb-icccm.so.4", "libxcb-icccm4"),
        ("libxcb-keysyms.so.1", "libxcb-keysyms1"),
        ("libxcb-cursor.so.0", "libxcb-cursor0"),
        ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
        ("libEGL.so.1", "libegl1"),
        ("libdbus-1.so.3", "libdbus-1-3"),
        ("libglib-2.0.so.0", "libglib2.0-0"),
    ],
)
def test_debian_package_names(soname: str, package: str) -> None:
    assert debian_package(soname) == package


def test_the_message_names_the_packages_and_the_headless_way() -> None:
    message = missing_message(["libxcb-icccm.so.4", "libxcb-keysyms.so.1"])
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1" in message
    assert "modeldeck serve" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("environ", "platform", "expected"),
    [
        ({"DISPLAY": ":0"}, "linux", True),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, "linux", True),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, "linux", False),
        ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
        ({"DISPLAY": ":0"}, "darwin", False),
    ],
)
def test_uses_xcb(environ: dict[str, str], platform: str, expected: bool) -> None:
    assert uses_xcb(environ, platform) is expected


def test_check_plugin_finds_what_the_loader_cannot(tmp_path: Path) -> None:
    assert check_plugin(elf_needing_an_absent_library(tmp_path)) == ["libmodeldeckabsent.so.1"]
    assert check_plugin(tmp_path / "no-such-plugin.so") == []


def test_run_gui_says_which_package_to_install_instead_of_starting_qt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], paths: AppPaths, tmp_path: Path
) -> None:
    monkeypatch.setenv("DISPLAY", ":99")
    for name in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    plugin = elf_needing_an_absent_library(tmp_path)
    monkeypatch.setattr(launch, "xcb_plugin", lambda: plugin)
    dialogs: list[str] = []
    monkeypatch.setattr(launch, "show_desktop_error", lambda message: dialogs.append(message) or True)

    def no_application(*_args: object) -> None:
        raise AssertionError("run_gui created a QApplication although Qt's plugin cannot load")

    monkeypatch.setattr(launch, "QApplication", no_application)

    assert launch.run_gui(paths, LoadedSettings(Settings())) == system_libraries.MISSING_LIBRARIES_EXIT_CODE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "libmodeldeckabsent.so.1" in err and "sudo apt install libmodeldeckabsent1" in err
    assert dialogs == [err.removeprefix("modeldeck: ")]


def test_the_real_xcb_plugin_is_where_the_check_looks() -> None:
    assert system_libraries.xcb_plugin().is_file()
