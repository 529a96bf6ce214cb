"""Before Qt opens a window on X11: are the system libraries its xcb platform plugin loads installed?

Without them Qt prints a plugin error and aborts ("Could not load the Qt platform plugin xcb"). Seen missing on
fresh Debian machines: libxcb-icccm4 and libxcb-keysyms1. `ldd` on the plugin names each library it cannot find;
the user gets one sentence naming the packages to install instead of Qt's dump.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import QLibraryInfo

MISSING_LIBRARIES_EXIT_CODE = 3
_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found\s*$")
_SONAME = re.compile(r"^lib(?P<stem>.+?)\.so\.(?P<major>\d+)")
# Debian package names that do not follow the soname rule below.
_PACKAGE_EXCEPTIONS = {"libglib-2.0.so.0": "libglib2.0-0", "libgthread-2.0.so.0": "libglib2.0-0"}


def xcb_plugin() -> Path:
    """Qt's xcb platform plugin, as the Qt that PySide6 ships has it."""
    plugins = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath))
    return plugins / "platforms" / "libqxcb.so"


def uses_xcb(environ: Mapping[str, str], platform: str = sys.platform) -> bool:
    """Whether Qt will pick its xcb plugin: Linux, an X11 display, no Wayland session, no platform chosen by hand."""
    chosen = environ.get("QT_QPA_PLATFORM", "")
    if not platform.startswith("linux") or (chosen and not chosen.startswith("xcb")):
        return False
    return bool(environ.get("DISPLAY")) and (chosen.startswith("xcb") or not environ.get("WAYLAND_DISPLAY"))


def missing_libraries(ldd_output: str) -> list[str]:
    """The sonames `ldd` reported as not found, in its order, once each."""
    found = (match.group(1) for line in ldd_output.splitlines() if (match := _NOT_FOUND.match(line)))
    return list(dict.fromkeys(found))


def debian_package(soname: str) -> str:
    """The Debian/Ubuntu package that ships `soname`: libxcb-icccm.so.4 -> libxcb-icccm4, libEGL.so.1 -> libegl1."""
    if soname in _PACKAGE_EXCEPTIONS:
        return _PACKAGE_EXCEPTIONS[soname]
    match = _SONAME.match(soname)
    if match is None:
        return soname
    stem = f"lib{match['stem'].lower()}"
    return f"{stem}{'-' if stem[-1].isdigit() else ''}{match['major']}"


def check_plugin(plugin: Path) -> list[str]:
    """The libraries `plugin` needs and this system lacks; empty when ldd is not there to ask (musl, macOS)."""
    ldd = shutil.which("ldd")
    if ldd is None or not plugin.is_file():
        return []
    try:
        done = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return missing_libraries(done.stdout)


def missing_message(sonames: list[str]) -> str:
    """One sentence: what is missing and the command that installs it."""
    packages = " ".join(dict.fromkeys(debian_package(name) for name in sonames))
    return (
        f"ModelDeck's window cannot open: Qt needs system libraries that are not installed ({', '.join(sonames)}); "
        f"install them with `sudo apt install {packages}` (Debian/Ubuntu), or run headless with `modeldeck serve`."
    )


def show_desktop_error(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """Show `message` in a dialog from a desktop tool that needs no Qt, where one is installed; True if started."""
    for argv in (["zenity", "--error", "--no-wrap", "--text"], ["kdialog", "--error"], ["xmessage", "-center"]):
        tool = shutil.which(argv[0])
        if tool is None:
            continue
        try:
            subprocess.Popen(
                [tool, *argv[1:], message], env=dict(environ if environ is not None else os.environ),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        except OSError:
            continue
        return True
    return False
